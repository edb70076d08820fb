// WebGPU for the tests: onnxruntime-node's WebGPU provider on whatever Vulkan
// device this machine has; on CI that is Mesa's lavapipe (a software renderer
// from bookworm-backports, which .ci/run installs). Without one the WebGPU
// tests skip and say why, unless CHATD_REQUIRE_SERVICES=1 (CI): then they fail,
// so a CI run can never pass by skipping them.
import type { Test } from 'tap'
import { type AdapterProbe, probeInChild } from '../../src/engine/onnx/device/webgpu.ts'

const REQUIRED = process.env.CHATD_REQUIRE_SERVICES === '1'
let probed: Promise<AdapterProbe> | null = null

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

/**
 * The device the engine's own tests load their models on: the CPU, or WebGPU when
 * CHATD_TEST_DEVICE=webgpu (`npm run test:webgpu` runs those files again so, on lavapipe in CI).
 */
export const TEST_DEVICE: 'cpu' | 'webgpu' = process.env.CHATD_TEST_DEVICE === 'webgpu' ? 'webgpu' : 'cpu'
