// ONNX_DEVICE at start: `cuda` on a machine without the CUDA execution provider
// fails that model's load with a message saying which file is missing where and
// the command that installs it; `auto` falls back to the CPU and says why in the
// log; `webgpu` runs on this machine's Vulkan driver (lavapipe on CI), and the
// log, /api/v1/models (admin accounts) and /metrics say which device a model runs on.

import { existsSync } from 'node:fs'
import { join } from 'node:path'
import { Writable } from 'node:stream'
import t, { type Test } from 'tap'
import { loadConfig } from '../../src/config.ts'
import { startServer } from '../../src/server.ts'
import { gpuDeviceNodes } from '../../src/engine/onnx/device/webgpu.ts'
import { storiesModelDir } from '../helpers/models.ts'
import { needWebgpu } from '../helpers/webgpu.ts'

const modelDir = storiesModelDir('int4')
const KEY = `sk-chatd-${'devices0'.repeat(4)}`
const ORT_BIN = new URL('../../node_modules/onnxruntime-node/bin/napi-v6/linux/x64/', import.meta.url).pathname
const hasCudaProvider = existsSync(join(ORT_BIN, 'libonnxruntime_providers_cuda.so'))
/** `auto` takes the CPU only where there is neither CUDA nor a GPU that WebGPU might reach. */
const noGpu = !hasCudaProvider && gpuDeviceNodes().length === 0
const GPU_HERE = 'this machine has CUDA or a GPU device, which auto would take'

async function serve (t: Test, device: string, models: Array<Record<string, unknown>> = [{ id: 'stories', backend: 'onnx', path: modelDir, dtype: 'q4' }]) {
  const dir = t.testdir({ 'models.json': JSON.stringify({ models }) })
  const logs: Array<Record<string, any>> = []
  const stream = new Writable({
    write (chunk, _enc, done) {
      for (const line of String(chunk).split('\n').filter(Boolean)) logs.push(JSON.parse(line))
      done()
    },
  })
  const config = loadConfig({ PORT: '0', DATABASE_URL: `sqlite://${join(dir, 'chatd.db')}`, MODELS_FILE: join(dir, 'models.json'), CHATD_ADMIN_KEY: KEY, ONNX_DEVICE: device, ONNX_THREADS: '1' })
  const app = await startServer(config, { print: () => {}, logger: { level: 'info', stream } })
  t.teardown(() => app.close())
  const deadline = Date.now() + 60000
  while (logs.filter(l => l.msg === 'model ready' || l.msg === 'model failed to load').length < models.length) {
    if (Date.now() > deadline) throw new Error('the model neither loaded nor failed')
    await new Promise(resolve => setTimeout(resolve, 20))
  }
  return { app, logs }
}

t.test('ONNX_DEVICE=cuda without CUDA: the model fails at start, saying which file is missing and how to install it', { skip: hasCudaProvider && 'onnxruntime-node\'s CUDA provider is installed here' }, async t => {
  const { app, logs } = await serve(t, 'cuda')
  const failed = logs.find(l => l.msg === 'model failed to load')
  t.match(failed, { level: 50, model: 'stories', err: { message: /^ONNX_DEVICE=cuda but onnxruntime-node's CUDA provider library is not installed: \/\S*onnxruntime-node\/bin\/napi-v6\/linux\/x64\/libonnxruntime_providers_cuda\.so does not exist\. Run npx chatd install-cuda to download it/ } })
  t.match(failed?.err.message, /Or set ONNX_DEVICE=auto/)
  const res = await app.inject({ method: 'POST', url: '/api/v1/chat/completions', headers: { authorization: `Bearer ${KEY}` }, payload: { model: 'stories', messages: [{ role: 'user', content: 'hi' }] } })
  t.equal(res.statusCode, 400)
  t.match(res.json().error, { code: 'model_out_of_service', message: /CUDA provider library is not installed: .*libonnxruntime_providers_cuda\.so does not exist\. Run npx chatd install-cuda/ })
})

t.test('ONNX_DEVICE=auto without CUDA: the model runs on the CPU and the log says so', { skip: !noGpu && GPU_HERE }, async t => {
  const { app, logs } = await serve(t, 'auto')
  t.match(logs.find(l => l.msg === 'model ready'), { model: 'stories', device: 'cpu', why: /^auto: onnxruntime-node's CUDA provider is not installed; / })
  t.ok(logs.some(l => l.msg === 'ONNX_DEVICE=auto: no GPU that chatd can use (CUDA, or a real GPU through WebGPU) on this machine, so local models run on the CPU'))
  t.equal((await app.inject({ url: '/readyz' })).statusCode, 200)
})

t.test('ONNX_DEVICE=auto without CUDA, two local models: the CPU line is said once', { skip: !noGpu && GPU_HERE }, async t => {
  const { logs } = await serve(t, 'auto', [{ id: 'a', backend: 'onnx', path: modelDir, dtype: 'q4' }, { id: 'b', backend: 'onnx', path: modelDir, dtype: 'q4' }])
  t.equal(logs.filter(l => l.msg === 'model ready').length, 2)
  t.equal(logs.filter(l => /no GPU that chatd can use/.test(l.msg)).length, 1)
})

t.test('a models.json entry with "device": "cuda" without CUDA: the message names the entry, not ONNX_DEVICE', { skip: hasCudaProvider && 'onnxruntime-node\'s CUDA provider is installed here' }, async t => {
  const { logs } = await serve(t, 'auto', [{ id: 'stories', backend: 'onnx', path: modelDir, dtype: 'q4', device: 'cuda' }])
  const failed = logs.find(l => l.msg === 'model failed to load')
  t.match(failed?.err.message, /^models\.json entry "stories" asks for "device": "cuda" but onnxruntime-node's CUDA provider library is not installed: .* Run npx chatd install-cuda to download it/)
  t.match(failed?.err.message, /Or set that entry's "device" to "auto" \(CUDA when it loads, then a real GPU through WebGPU, else the CPU\) or "cpu", or remove it to follow ONNX_DEVICE\.$/)
  t.notMatch(failed?.err.message, /ONNX_DEVICE=/)
})

t.test('ONNX_DEVICE=auto where only a software Vulkan renderer is installed: the CPU, never the renderer', { skip: !noGpu && GPU_HERE }, async t => {
  const { logs } = await serve(t, 'auto')
  t.match(logs.find(l => l.msg === 'model ready'), { device: 'cpu', why: /no GPU device on this machine/ })
})

t.test('ONNX_DEVICE=webgpu: the model runs on WebGPU; the log, /api/v1/models for an admin and /metrics say so', async t => {
  if (!await needWebgpu(t)) return
  const { app, logs } = await serve(t, 'webgpu', [
    { id: 'stories', backend: 'onnx', path: storiesModelDir('fp32', 'concat'), dtype: 'fp32' },
    // The CPU form (an append graph) runs too, and the log says it is not the GPU form.
    { id: 'cpu-form', backend: 'onnx', path: storiesModelDir('fp32'), dtype: 'fp32' },
  ])
  t.match(logs.find(l => l.msg === 'model ready' && l.model === 'stories'), { model: 'stories', device: 'webgpu', why: /^asked for \(ONNX_DEVICE=webgpu\)/, cacheOnDevice: true })
  t.match(logs.find(l => l.msg === 'model ready' && l.model === 'cpu-form'), { device: 'webgpu', cacheOnDevice: false })
  const warned = logs.filter(l => /not in the GPU form/.test(l.msg))
  t.same(warned.map(l => l.model), ['cpu-form'], 'said for the CPU form only')
  t.match(warned[0], { level: 40, msg: /`chatd pull <model id>` converts a checkpoint into the GPU form/ })
  const auth = { authorization: `Bearer ${KEY}` }
  const res = await app.inject({ method: 'POST', url: '/api/v1/chat/completions', headers: auth, payload: { model: 'stories', messages: [{ role: 'user', content: 'Once upon a time' }], max_tokens: 8, temperature: 0 } })
  t.equal(res.statusCode, 200)
  t.equal(res.json().usage.completion_tokens, 8, 'a reply generated on WebGPU')
  const model = (await app.inject({ url: '/api/v1/models/stories', headers: auth })).json()
  t.match(model, { id: 'stories', status: 'ready', device: 'webgpu', device_reason: /^asked for \(ONNX_DEVICE=webgpu\)/, cache_on_device: true })
  const metrics = (await app.inject({ url: '/metrics' })).body
  t.match(metrics, /^chatd_model_device\{model="stories",device="webgpu"\} 1$/m)
})
