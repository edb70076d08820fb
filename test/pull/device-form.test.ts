// Which form a pull converts a checkpoint into, by the device the model will run on.
import t from 'tap'
import { cudaProviderInstalled } from '../../src/engine/onnx/device/providers.ts'
import { probeGpuAdapter } from '../../src/engine/onnx/device/webgpu.ts'
import { formForDevice } from '../../src/pull/device-form.ts'

t.test('a device named: WebGPU gets the GPU form; the CPU and CUDA the CPU form; who asked is said', async t => {
  t.same(await formForDevice('webgpu'), { form: 'gpu', why: 'ONNX_DEVICE=webgpu' })
  t.same(await formForDevice('cpu', 'models.json entry "m"'), { form: 'cpu', why: 'models.json entry "m"\'s "device": "cpu"' })
  t.same(await formForDevice('cuda'), { form: 'cpu', why: 'ONNX_DEVICE=cuda' }, 'CUDA runs the graph it always has')
})

t.test('auto answers as the engine will: CUDA first, then a real GPU through WebGPU, else the CPU', async t => {
  const picked = await formForDevice('auto')
  if (cudaProviderInstalled()) {
    t.same(picked, { form: 'cpu', why: 'ONNX_DEVICE=auto, and onnxruntime\'s CUDA provider is installed' })
    return
  }
  const gpu = await probeGpuAdapter()
  t.same(picked, { form: gpu.gpu ? 'gpu' : 'cpu', why: `ONNX_DEVICE=auto: ${gpu.reason}` })
  // A software renderer (lavapipe) is never a GPU here, as it is never one for the engine's auto.
  if (!gpu.gpu) t.match(picked.why, /no GPU device on this machine|no WebGPU adapter on a real GPU|Vulkan loader/)
})
