// WebGPU for the tests: onnxruntime-node's WebGPU provider on whatever Vulkan
// device this machine has; on CI that is Mesa's lavapipe (a software renderer
// from bookworm-backports, which .ci/run installs). Without one the WebGPU
// tests skip and say why, unless CHATD_REQUIRE_SERVICES=1 (CI): then they fail,
// so a CI run can never pass by skipping them.
import { readFileSync } from 'node:fs'
import tap, { type Test } from 'tap'
import { type AdapterProbe, probeInChild } from '../../src/engine/onnx/device/webgpu.ts'

const REQUIRED = process.env.CHATD_REQUIRE_SERVICES === '1'
let probed: Promise<AdapterProbe> | null = null
// Lavapipe (the software renderer CI runs these tests on) runs each kernel on a pool of threads;
// for kernels this small the hand-off costs more than it saves: run on the thread that submits them,
// the WebGPU tests take ~12 % less time there. Read by lavapipe alone, never by a real GPU's driver;
// servers a test starts as processes of their own inherit it.
process.env.LP_NUM_THREADS ??= '0'

/** Whether a WebGPU session can run here (software renderers included), asked once per test process. */
export function webgpuAdapter (): Promise<AdapterProbe> {
  probed ??= probeInChild({ software: true })
  return probed
}

/** Skips (or, with CHATD_REQUIRE_SERVICES=1, fails) the test; returns false when there is no WebGPU adapter. */
export async function needWebgpu (t: Test): Promise<boolean> {
  const adapter = await webgpuAdapter()
  if (adapter.gpu) return true
  const reason = `${adapter.reason}; install a Vulkan driver (Debian 12: mesa-vulkan-drivers from bookworm-backports, see docs/development.md)`
  if (REQUIRED) t.fail(`${reason}, and CHATD_REQUIRE_SERVICES=1 says the WebGPU tests must run`)
  else t.pass(`${t.name} needs WebGPU`, { skip: reason })
  return false
}

export { perDevice, referenceDevice, testDevice } from './test-device.ts'

/**
 * Runs the test file `file` (a URL or path relative to the caller's `from`) in this process with
 * every model it loads through `testDevice()` on WebGPU. Without an adapter the file skips (or,
 * with CHATD_REQUIRE_SERVICES=1, fails) instead.
 */
export async function runOnWebgpu (from: string, file: string): Promise<void> {
  process.env.CHATD_TEST_DEVICE = 'webgpu'
  if (!await needWebgpu(tap)) return
  const url = new URL(file, from)
  // A model that file names the CPU for would run there, and this file would prove nothing of WebGPU.
  const pinned = readFileSync(url, 'utf8').split('\n').findIndex(line => /device: 'cpu'/.test(line))
  if (pinned >= 0) tap.fail(`${file}:${pinned + 1} loads a model with device: 'cpu'; use testDevice() so it runs on WebGPU here`)
  await import(url.href)
}
