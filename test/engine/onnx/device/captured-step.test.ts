// The captured decode step (device/captured-step.ts) on the tests' WebGPU adapter (lavapipe in
// CI): a row's cache loaded from the host's copy, then greedy steps replayed from one recording,
// give the GPU form's tokens on the CPU provider and its new keys and values (cache_delta, which
// keeps the host's copy); a row loaded again after leaving goes on as before; and what it refuses.
import t from 'tap'
import { GraphBuilder } from '../../../../src/convert/graph-builder.ts'
import { DataType, encodeModel } from '../../../../src/convert/onnx-proto.ts'
import { OnnxBackend } from '../../../../src/engine/onnx/backend.ts'
import { CapturedStep, DOWNLOAD_GRAPH, LOAD_GRAPH, UPLOAD_GRAPH } from '../../../../src/engine/onnx/device/captured-step.ts'
import { ort } from '../../../../src/engine/onnx/device/ort.ts'
import { readModelDir } from '../../../../src/engine/onnx/model-dir.ts'
import { argmax } from '../../../../src/engine/onnx/sampling/sampler.ts'
import { LocalEngine } from '../../../../src/engine/onnx/scheduler/engine.ts'
import { kvBytesPerToken, SLOT_SLACK } from '../../../../src/engine/onnx/cache/kv-budget.ts'
import { randomCaptureStepModelDir, randomGpuFormModelDir } from '../../../helpers/models.ts'
import { needWebgpu } from '../../../helpers/webgpu.ts'

const PROMPT = [256, 72, 101, 108, 108, 111, 44, 32, 119, 111, 114, 108, 100, 33, 10, 200, 17]
const STEPS = 12

function identityGraph (tensors: Record<string, { type: number; dims: string[] }>): Buffer {
  const g = new GraphBuilder(null)
  for (const [name, { type, dims }] of Object.entries(tensors)) {
    g.op('Identity', [g.input(name, type, dims)], {}, { output: `${name}_out` })
    g.output(`${name}_out`, type, dims)
  }
  return Buffer.from(encodeModel(g.build([{ domain: '', version: 17 }], {})))
}

/** The load graph: Pad of `cache` by `pads` into cache_out, whose length is the buffer's room. */
function padGraph (): Buffer {
  const g = new GraphBuilder(null)
  g.op('Pad', [g.input('cache', DataType.FLOAT, ['rows', 'heads', 'length', 'dim']), g.input('pads', DataType.INT64, [8])], {}, { output: 'cache_out' })
  g.output('cache_out', DataType.FLOAT, ['rows', 'heads', 'room', 'dim'])
  return Buffer.from(encodeModel(g.build([{ domain: '', version: 17 }], {})))
}

t.test('the copy graphs are Identity and Pad nodes over symbolic dimensions, as chatd\'s graph writer writes them', async t => {
  const I64 = DataType.INT64
  const F = DataType.FLOAT
  t.same(identityGraph({ input_ids: { type: I64, dims: ['rows', 'one'] }, position_ids: { type: I64, dims: ['rows', 'one'] }, attention_mask: { type: I64, dims: ['rows', 'length'] } }), UPLOAD_GRAPH)
  t.same(identityGraph({ logits: { type: F, dims: ['rows', 'one', 'vocab'] }, cache_delta: { type: F, dims: ['layers', 'rows', 'heads', 'one', 'dim'] } }), DOWNLOAD_GRAPH)
  t.same(padGraph(), LOAD_GRAPH)
})

interface Reference {
  tokens: number[]
  /** The cache after the prompt and after each step, by cache name ([1, kv heads, positions, head_dim]). */
  caches: Array<Record<string, Float32Array>>
  deltas: Array<Record<string, Float32Array>>
}

/** The GPU form on the CPU provider: the prompt, then STEPS greedy steps on a growing cache. */
async function cpuReference (dir: string): Promise<Reference> {
  const model = readModelDir(dir, 'q4')
  const session = await ort.InferenceSession.create(model.onnxPath, { executionProviders: ['cpu'] })
  const int64 = (values: number[], dims: number[]): ort.Tensor => new ort.Tensor('int64', BigInt64Array.from(values, BigInt), dims)
  let past: Record<string, ort.Tensor> = {}
  for (let i = 0; i < model.numLayers; i++) for (const kv of ['key', 'value']) past[`past_key_values.${i}.${kv}`] = new ort.Tensor('float32', new Float32Array(0), [1, model.numKvHeads, 0, model.headDim])
  const ref: Reference = { tokens: [], caches: [], deltas: [] }
  let ids = PROMPT
  let length = 0
  for (let step = 0; step <= STEPS; step++) {
    const total = length + ids.length
    const out = await session.run({ input_ids: int64(ids, [1, ids.length]), attention_mask: int64(new Array<number>(total).fill(1), [1, total]), position_ids: int64(ids.map((_, j) => length + j), [1, ids.length]), num_logits_to_keep: int64([1], []), ...past })
    ref.tokens.push(argmax(out.logits.data as Float32Array))
    past = {}
    const cache: Record<string, Float32Array> = {}
    const delta = out.cache_delta.data as Float32Array
    const each = model.numKvHeads * ids.length * model.headDim
    const entries: Record<string, Float32Array> = {}
    for (let i = 0; i < model.numLayers; i++) {
      for (const [k, kv] of ['key', 'value'].entries()) {
        const name = `past_key_values.${i}.${kv}`
        past[name] = out[`present.${i}.${kv}`]
        cache[name] = out[`present.${i}.${kv}`].data as Float32Array
        entries[name] = delta.slice((2 * i + k) * each, (2 * i + k + 1) * each)
      }
    }
    ref.caches.push(cache)
    if (step > 0) ref.deltas.push(entries)
    length = total
    ids = [ref.tokens[ref.tokens.length - 1]]
  }
  await session.release()
  return ref
}

t.test('a captured step replays the GPU form\'s decode: its tokens and new keys and values, after a load and after a reload', async t => {
  if (!await needWebgpu(t)) return
  const dir = randomCaptureStepModelDir()
  const model = readModelDir(dir, 'q4')
  t.ok(model.stepOnnxPath?.endsWith('onnx/model_step.onnx'), 'the converter wrote the step beside the GPU form (--capture-step)')
  const ref = await cpuReference(dir)
  const step = CapturedStep.open(model, 64)
  t.teardown(() => step.close())
  t.equal(step.cacheBytes, 2 * model.numLayers * model.numKvHeads * 64 * model.headDim * 4)
  const row = {}
  // The host's copy has room past the row's positions (capacity > length), as SlotBuffers keeps it.
  const capacity = PROMPT.length + 5
  const widen = (cache: Record<string, Float32Array>, length: number): Record<string, Float32Array> => Object.fromEntries(Object.entries(cache).map(([name, data]) => {
    const out = new Float32Array(model.numKvHeads * capacity * model.headDim)
    for (let h = 0; h < model.numKvHeads; h++) out.set(data.subarray(h * length * model.headDim, (h + 1) * length * model.headDim), h * capacity * model.headDim)
    return [name, out]
  }))
  step.load(row, widen(ref.caches[0], PROMPT.length), capacity, PROMPT.length)
  t.ok(step.holds(row, PROMPT.length))
  const tokens = [ref.tokens[0]]
  let worstDelta = 0
  let worstLogits = 0
  const cpuLogitsFree = true
  for (let s = 0; s < STEPS; s++) {
    const out = step.step(row, tokens[tokens.length - 1])
    tokens.push(argmax(out.logits))
    for (const [name, data] of Object.entries(ref.deltas[s])) {
      for (let k = 0; k < data.length; k++) worstDelta = Math.max(worstDelta, Math.abs(data[k] - out.newEntries[name][k]))
    }
    t.equal(Object.keys(out.newEntries).length, 2 * model.numLayers)
    worstLogits = Math.max(worstLogits, out.logits.length === model.vocabSize ? 0 : Infinity)
  }
  t.ok(cpuLogitsFree && worstLogits === 0, 'the logits of the vocabulary, one row')
  t.same(tokens, ref.tokens, `the CPU's ${STEPS + 1} greedy tokens`)
  t.ok(worstDelta < 1e-4, `each step's new keys and values within ${worstDelta.toExponential(1)} of the CPU's`)
  t.ok(step.holds(row, PROMPT.length + STEPS), 'it holds the row and its positions')

  // Another row takes the buffers; the first comes back from its host copy at step 5 and goes on alike.
  const other = {}
  step.load(other, widen(ref.caches[0], PROMPT.length), capacity, PROMPT.length)
  t.notOk(step.holds(row, PROMPT.length + STEPS))
  t.throws(() => step.step(row, 1), /hold another row's cache/)
  const back = ref.caches[5]
  const length = PROMPT.length + 5
  const room = length + 3
  const wide = Object.fromEntries(Object.entries(back).map(([name, data]) => {
    const out = new Float32Array(model.numKvHeads * room * model.headDim)
    for (let h = 0; h < model.numKvHeads; h++) out.set(data.subarray(h * length * model.headDim, (h + 1) * length * model.headDim), h * room * model.headDim)
    return [name, out]
  }))
  step.load(row, wide, room, length)
  const again = [ref.tokens[5]]
  for (let s = 5; s < STEPS; s++) again.push(argmax(step.step(row, again[again.length - 1]).logits))
  t.same(again, ref.tokens.slice(5), 'loaded again from the host\'s copy, the same tokens')

  t.throws(() => step.load(row, wide, room, 64), /cannot take a row of 64/, 'a row as long as its buffers is refused (no room for its next token)')
  step.release(row)
  t.notOk(step.holds(row, length + STEPS - 5))
})

t.test('a model without the step file, or a step too short, is refused with what to do', async t => {
  const model = readModelDir(randomGpuFormModelDir('int4'), 'q4')
  t.equal(model.stepOnnxPath, null)
  t.throws(() => CapturedStep.open(model, 64), /no onnx\/model_step\.onnx \(convert the model again with chatd convert --for gpu --capture-step\)/)
  t.throws(() => CapturedStep.open(readModelDir(randomCaptureStepModelDir(), 'q4'), 1), /at least 2 positions/)
})

t.test('the engine opens the capture step on WebGPU when asked (ONNX_WEBGPU_CAPTURE), says so, and says what to convert when it cannot', async t => {
  if (!await needWebgpu(t)) return
  const events = { delta: () => {}, finish: () => {}, error: () => {} }
  const on = await LocalEngine.load({ modelDir: randomCaptureStepModelDir(), dtype: 'q4', device: 'webgpu', threads: 1, webgpuCapture: 96 }, events)
  t.equal(on.capturePositions, 96, 'its positions, for the "model ready" line')
  await on.close()
  // Its buffers take GPU memory for every position: never more than one sequence may hold.
  const capped = await LocalEngine.load({ modelDir: randomCaptureStepModelDir(), dtype: 'q4', device: 'webgpu', threads: 1, webgpuCapture: 4096, contextLength: 80 }, events)
  t.equal(capped.capturePositions, 80, 'models.json\'s contextLength bounds it')
  await capped.close()
  const budgeted = await LocalEngine.load({ modelDir: randomCaptureStepModelDir(), dtype: 'q4', device: 'webgpu', threads: 1, webgpuCapture: 4096, kvCacheBytes: 200 * kvBytesPerToken(readModelDir(randomCaptureStepModelDir(), 'q4'), 'float32') }, events)
  t.equal(budgeted.capturePositions, 200 - SLOT_SLACK, 'and so does the KV budget')
  await budgeted.close()
  const off = await LocalEngine.load({ modelDir: randomCaptureStepModelDir(), dtype: 'q4', device: 'webgpu', threads: 1 }, events)
  t.equal(off.capturePositions, 0, 'off unless asked for')
  await off.close()
  const cpu = await LocalEngine.load({ modelDir: randomCaptureStepModelDir(), dtype: 'q4', device: 'cpu', threads: 1, webgpuCapture: 96 }, events)
  t.equal(cpu.capturePositions, 0, 'the WebGPU device\'s setting: on the CPU there is no capture to reach')
  await cpu.close()
  await t.rejects(LocalEngine.load({ modelDir: randomGpuFormModelDir('int4'), dtype: 'q4', device: 'webgpu', threads: 1, webgpuCapture: 96 }, events),
    /ONNX_WEBGPU_CAPTURE needs onnx\/model_step\.onnx beside the GPU form: convert the model again with chatd convert --for gpu --capture-step/)
})

t.test('in the engine\'s own thread (a worker, as the server runs it): the step opens, the ready message says so, and a reply is the one without it', async t => {
  if (!await needWebgpu(t)) return
  const dir = randomCaptureStepModelDir()
  const request = { temperature: 0, topP: 1, topK: 0, stop: [] as string[], messages: [{ role: 'user' as const, content: 'Once upon a time' }], maxTokens: 24 }
  const reply = async (settings: { webgpuCapture?: number }): Promise<{ text: string; positions?: number }> => {
    const backend = new OnnxBackend({ id: 'capture', path: dir, dtype: 'q4', device: 'webgpu', threads: 1, ...settings })
    try {
      await backend.load()
      let text = ''
      for await (const e of backend.generate(request, new AbortController().signal)) if (e.type === 'delta') text += (e.reasoning ?? '') + (e.content ?? '')
      return { text, positions: backend.capturePositions }
    } finally {
      await backend.close()
    }
  }
  const plain = await reply({})
  const captured = await reply({ webgpuCapture: 256 })
  t.equal(plain.positions, 0)
  t.equal(captured.positions, 256, 'the worker says the step is open (the "model ready" line\'s capturePositions)')
  t.ok(plain.text.length > 0)
  t.equal(captured.text, plain.text, 'the same reply, greedy')
})
