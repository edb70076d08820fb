// What chatd finds of WebGPU on a machine: the GPU's device nodes, the Vulkan
// loader and driver files, the probe that tells a real GPU from a software
// renderer, and the error when WebGPU is asked for by name and cannot start.
// Each session that must not see this machine's drivers runs in a child
// process with its own Vulkan environment (Dawn's instance is per process).
import fs from 'node:fs'
import path from 'node:path'
import t from 'tap'
import { createSession } from '../../../../src/engine/onnx/device/providers.ts'
import { PAD_MODEL } from '../../../../src/engine/onnx/device/gpu-buffers.ts'
import { PROBE_MODEL } from '../../../../src/engine/onnx/device/probe-model.ts'
import { gpuDeviceNodes, isSoftwareDriver, probeGpuAdapter, probeInChild, vulkanDriverFiles, vulkanLoader } from '../../../../src/engine/onnx/device/webgpu.ts'
import { attr, GraphBuilder } from '../../../../src/convert/graph-builder.ts'
import { DataType, encodeModel } from '../../../../src/convert/onnx-proto.ts'
import { runModuleSource } from '../../../helpers/node-script.ts'
import { needWebgpu } from '../../../helpers/webgpu.ts'

const PROVIDERS = new URL('../../../../src/engine/onnx/device/providers.ts', import.meta.url).pathname

t.test('the probe graph is y = x + x over float[4], as chatd\'s graph writer writes it', async t => {
  const g = new GraphBuilder(null)
  g.op('Add', [g.input('x', DataType.FLOAT, [4]), 'x'], {}, { output: 'y' })
  g.output('y', DataType.FLOAT, [4])
  t.same(Buffer.from(encodeModel(g.build([{ domain: '', version: 17 }], {}))), PROBE_MODEL)
})

t.test('the graph that makes a kept-in-place cache\'s GPU buffers is Pad with zeros on [rows, heads, positions, dim], as chatd\'s graph writer writes it', async t => {
  const g = new GraphBuilder(null)
  const source = g.input('source', DataType.FLOAT, ['rows', 'heads', 'held', 'dim'])
  g.op('Pad', [source, g.input('pads', DataType.INT64, [8])], { mode: attr.s('constant') }, { output: 'padded' })
  g.output('padded', DataType.FLOAT, ['rows', 'heads', 'room', 'dim'])
  t.same(Buffer.from(encodeModel(g.build([{ domain: '', version: 17 }], {}))), PAD_MODEL)
})

t.test('GPU device nodes: NVIDIA\'s, DRM render nodes and WSL\'s count; a card node or anything else does not', async t => {
  const dev = t.testdir({ nvidia0: '', nvidia1: '', nvidiactl: '', 'nvidia-uvm': '', dxg: '', null: '', dri: { renderD128: '', card0: '' } })
  t.same(gpuDeviceNodes(dev), [path.join(dev, 'dri', 'renderD128'), path.join(dev, 'dxg'), path.join(dev, 'nvidia0'), path.join(dev, 'nvidia1')])
  t.same(gpuDeviceNodes(t.testdir({ dri: { card0: '' } })), [])
  t.same(gpuDeviceNodes(path.join(dev, 'missing')), [])
})

t.test('Vulkan driver files: VK_DRIVER_FILES (files or folders) wins, VK_ADD_DRIVER_FILES adds; software renderers are told apart by name', async t => {
  const dir = t.testdir({ icd: { 'nvidia_icd.json': '{}', 'lvp_icd.x86_64.json': '{}', 'notes.txt': '' }, 'extra_icd.json': '{}' })
  const icd = path.join(dir, 'icd')
  t.same(vulkanDriverFiles({ VK_DRIVER_FILES: icd }).sort(), [path.join(icd, 'lvp_icd.x86_64.json'), path.join(icd, 'nvidia_icd.json')])
  t.same(vulkanDriverFiles({ VK_ICD_FILENAMES: path.join(icd, 'nvidia_icd.json'), VK_ADD_DRIVER_FILES: path.join(dir, 'extra_icd.json') }),
    [path.join(icd, 'nvidia_icd.json'), path.join(dir, 'extra_icd.json')])
  t.same(vulkanDriverFiles({ VK_DRIVER_FILES: path.join(dir, 'missing.json') }), [])
  t.same(vulkanDriverFiles({ XDG_CONFIG_HOME: dir, XDG_CONFIG_DIRS: dir, XDG_DATA_HOME: dir, XDG_DATA_DIRS: dir, HOME: dir }).filter(f => f.startsWith(dir)), [], 'the standard folders under a home without vulkan/icd.d: none there')
  t.ok(isSoftwareDriver('/usr/share/vulkan/icd.d/lvp_icd.json'))
  t.ok(isSoftwareDriver('vk_swiftshader_icd.json'))
  t.notOk(isSoftwareDriver('/usr/share/vulkan/icd.d/nvidia_icd.json'))
  t.notOk(isSoftwareDriver('radeon_icd.x86_64.json'))
})

t.test('auto on a machine without a GPU device is answered without starting anything', { skip: (process.platform !== 'linux' || gpuDeviceNodes().length > 0) && 'this machine has a GPU device (or is not Linux)' }, async t => {
  const started = performance.now()
  t.match(await probeGpuAdapter(), { gpu: false, reason: /^no GPU device on this machine/ })
  t.ok(performance.now() - started < 1000, 'no child process was started')
})

t.test('the probe: WebGPU on this machine\'s Vulkan driver, then the same with the software renderers left out', async t => {
  if (!await needWebgpu(t)) return
  t.match(await probeInChild({ software: true }), { gpu: true, reason: 'a WebGPU adapter' })
  // Without a GPU device only a software renderer can have answered above.
  if (gpuDeviceNodes().length === 0) {
    t.match(await probeInChild({ software: false }), { gpu: false, reason: /^no WebGPU adapter on a real GPU: Failed to get a WebGPU adapter/ }, 'lavapipe is never taken for a GPU')
  }
})

t.test('the loader is found where the dynamic linker finds it', { skip: process.platform !== 'linux' && 'Linux only' }, async t => {
  const found = vulkanLoader({})
  if (found === null) t.notOk(fs.existsSync('/usr/lib/x86_64-linux-gnu/libvulkan.so.1'), 'none on this machine')
  else t.match(found, /\/libvulkan\.so\.1$/)
  const dir = t.testdir({ 'libvulkan.so.1': '' })
  t.equal(vulkanLoader({ LD_LIBRARY_PATH: `/nowhere:${dir}` }), path.join(dir, 'libvulkan.so.1'), 'LD_LIBRARY_PATH first')
})

/** createSession on the probe graph in a child process with `env`; the error message, or 'ok'. */
async function sessionIn (device: string, env: NodeJS.ProcessEnv, deviceFrom?: string): Promise<string> {
  const source = `
    import { createSession, DeviceError } from ${JSON.stringify(PROVIDERS)}
    import { PROBE_MODEL } from ${JSON.stringify(PROVIDERS.replace('providers.ts', 'probe-model.ts'))}
    try {
      const loaded = await createSession(PROBE_MODEL, { device: ${JSON.stringify(device)}, threads: 1${deviceFrom ? `, deviceFrom: ${JSON.stringify(deviceFrom)}` : ''} })
      console.log(JSON.stringify({ device: loaded.device, why: loaded.why }))
    } catch (err) {
      console.log(JSON.stringify({ error: err.message, deviceError: err instanceof DeviceError }))
    }`
  const run = await runModuleSource(source, { env: { ...process.env, ...env }, killAfterMs: 60_000 })
  const line = run.stdout.trim().split('\n').at(-1) ?? ''
  t.comment(run.stderr.split('\n').filter(l => !/^Warning|^\s*$/.test(l)).slice(0, 3).join('\n'))
  return line
}

t.test('ONNX_DEVICE=webgpu where Vulkan finds no driver: one clear error naming what is missing and the other choices', async t => {
  const dir = t.testdir({})
  const result = JSON.parse(await sessionIn('webgpu', { VK_DRIVER_FILES: path.join(dir, 'none.json') }))
  t.equal(result.deviceError, true, 'a DeviceError')
  t.match(result.error, /^ONNX_DEVICE=webgpu but onnxruntime's WebGPU execution provider could not start: Failed to get a WebGPU adapter/)
  if (process.platform === 'linux') t.match(result.error, /no Vulkan driver manifest \(ICD file\) was found \(NVIDIA: nvidia_icd\.json, which the NVIDIA container runtime mounts when NVIDIA_DRIVER_CAPABILITIES includes graphics/)
  t.match(result.error, /See docs\/deployment\.md \(GPUs\)\. Or set ONNX_DEVICE=auto \(CUDA when it loads, then a real GPU through WebGPU, else the CPU\) or ONNX_DEVICE=cpu\.$/)
  t.notMatch(result.error, /\n/, 'one line')

  const entry = JSON.parse(await sessionIn('webgpu', { VK_DRIVER_FILES: path.join(dir, 'none.json') }, 'models.json entry "m"'))
  t.match(entry.error, /^models\.json entry "m" asks for "device": "webgpu" but onnxruntime's WebGPU execution provider could not start/)
  t.match(entry.error, /Or set that entry's "device" to "auto" .* or "cpu", or remove it to follow ONNX_DEVICE\.$/)
})

t.test('ONNX_DEVICE=webgpu on this machine\'s driver (lavapipe on CI): the session runs on WebGPU', async t => {
  if (!await needWebgpu(t)) return
  const result = JSON.parse(await sessionIn('webgpu', {}))
  t.equal(result.device, 'webgpu')
  t.equal(result.why, gpuDeviceNodes().length === 0
    ? 'asked for (ONNX_DEVICE=webgpu); there is no GPU device on this machine, so a software Vulkan renderer (such as lavapipe) runs it'
    : 'asked for (ONNX_DEVICE=webgpu)')
})

t.test('auto never takes a software renderer: with only lavapipe, the CPU, saying why', { skip: (process.platform !== 'linux' || gpuDeviceNodes().length > 0) && 'this machine has a GPU device (or is not Linux)' }, async t => {
  const result = JSON.parse(await sessionIn('auto', {}))
  t.equal(result.device, 'cpu')
  t.match(result.why, /^auto: onnxruntime-node's CUDA provider is not installed; no GPU device on this machine/)
})

t.test('createSession: cpu asked for by name says so', async t => {
  const loaded = await createSession(PROBE_MODEL, { device: 'cpu', threads: 1 })
  t.match(loaded, { device: 'cpu', why: 'asked for (ONNX_DEVICE=cpu)' })
  await loaded.session.release()
})
