// The captured decode step (device/captured-step.ts) on the tests' WebGPU adapter (lavapipe in
// CI): a row's cache loaded from the host's copy, then greedy steps replayed from one recording,
// give the GPU form's tokens on the CPU provider and its new keys and values (cache_delta, which
// keeps the host's copy); a row loaded again after leaving goes on as before; several rows of
// different lengths step together, leave and join; and what it refuses.
import t from 'tap'
import { GraphBuilder } from '../../../../src/convert/graph-builder.ts'
import { DataType, encodeModel } from '../../../../src/convert/onnx-proto.ts'
import { OnnxBackend } from '../../../../src/engine/onnx/backend.ts'
import { CapturedStep, DOWNLOAD_GRAPH, LOAD_GRAPH, type StepOutput, type StepRow, UPLOAD_GRAPH } from '../../../../src/engine/onnx/device/captured-step.ts'
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

/** The GPU form on the CPU provider: `prompt`, then STEPS greedy steps on a growing cache. */
async function cpuReference (dir: string, prompt = PROMPT): Promise<Reference> {
  const model = readModelDir(dir, 'q4')
  const session = await ort.InferenceSession.create(model.onnxPath, { executionProviders: ['cpu'] })
  const int64 = (values: number[], dims: number[]): ort.Tensor => new ort.Tensor('int64', BigInt64Array.from(values, BigInt), dims)
  let past: Record<string, ort.Tensor> = {}
  for (let i = 0; i < model.numLayers; i++) for (const kv of ['key', 'value']) past[`past_key_values.${i}.${kv}`] = new ort.Tensor('float32', new Float32Array(0), [1, model.numKvHeads, 0, model.headDim])
  const ref: Reference = { tokens: [], caches: [], deltas: [] }
  let ids = prompt
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

/**
 * A row as the engine keeps it: its host copy ([1, kv heads, capacity, head_dim] by cache name,
 * room past its positions as SlotBuffers keeps it), which each step's new keys and values extend;
 * it starts `at` steps into a reference, and each step feeds the reference's token there.
 */
class HostRow {
  readonly buffers: Record<string, Float32Array> = {}
  readonly capacity: number
  readonly ref: Reference
  key: object = {}
  at: number
  length: number
  readonly #heads: number
  readonly #dim: number

  constructor (ref: Reference, at: number, heads: number, dim: number) {
    this.ref = ref
    this.#heads = heads
    this.#dim = dim
    this.at = at
    const first = Object.values(ref.caches[at])[0]
    this.length = first.length / (heads * dim)
    this.capacity = this.length + STEPS + 3
    for (const [name, data] of Object.entries(ref.caches[at])) {
      const wide = new Float32Array(heads * this.capacity * dim)
      for (let h = 0; h < heads; h++) wide.set(data.subarray(h * this.length * dim, (h + 1) * this.length * dim), h * this.capacity * dim)
      this.buffers[name] = wide
    }
  }

  /** The step's row: the reference's token at this point. */
  get stepRow (): StepRow {
    return { key: this.key, length: this.length, token: this.ref.tokens[this.at], buffers: this.buffers, capacity: this.capacity, row: 0 }
  }

  /** Takes a step's output: its new keys and values into the host copy; the token it gives, and the reference's next. */
  took (out: StepOutput, i: number): { got: number; want: number; worstDelta: number } {
    let worstDelta = 0
    for (const [name, data] of Object.entries(out.newEntries[i])) {
      const want = this.ref.deltas[this.at][name]
      for (let k = 0; k < data.length; k++) worstDelta = Math.max(worstDelta, Math.abs(data[k] - want[k]))
      for (let h = 0; h < this.#heads; h++) this.buffers[name].set(data.subarray(h * this.#dim, (h + 1) * this.#dim), (h * this.capacity + this.length) * this.#dim)
    }
    this.key = out.keys[i]
    this.length++
    this.at++
    return { got: argmax(out.logits[i]), want: this.ref.tokens[this.at], worstDelta }
  }
}

/** Steps `rows` together `steps` times; each row's tokens against its reference's, and the worst delta. */
function stepTogether (step: CapturedStep, rows: HostRow[], steps: number): { got: number[][]; want: number[][]; worstDelta: number; loads: boolean[] } {
  const got = rows.map(() => [] as number[])
  const want = rows.map(() => [] as number[])
  const loads: boolean[] = []
  let worstDelta = 0
  for (let s = 0; s < steps; s++) {
    const out = step.step(rows.map(r => r.stepRow))
    loads.push(out.loaded)
    rows.forEach((row, i) => {
      const took = row.took(out, i)
      got[i].push(took.got)
      want[i].push(took.want)
      worstDelta = Math.max(worstDelta, took.worstDelta)
    })
  }
  return { got, want, worstDelta, loads }
}

t.test('a captured step replays the GPU form\'s decode: its tokens and new keys and values, after a load and after a reload', async t => {
  if (!await needWebgpu(t)) return
  const dir = randomCaptureStepModelDir()
  const model = readModelDir(dir, 'q4')
  t.ok(model.stepOnnxPath?.endsWith('onnx/model_step.onnx'), 'the converter wrote the step beside the GPU form (--capture-step)')
  const ref = await cpuReference(dir)
  const step = CapturedStep.open(model, 64)
  t.teardown(() => step.close())
  t.equal(step.rows, 1)
  t.equal(step.cacheBytes, 2 * model.numLayers * model.numKvHeads * 64 * model.headDim * 4)
  const row = new HostRow(ref, 0, model.numKvHeads, model.headDim)
  const first = step.step([row.stepRow])
  t.equal(first.logits.length, 1)
  t.equal(first.logits[0].length, model.vocabSize, 'the logits of the vocabulary, one row')
  t.equal(Object.keys(first.newEntries[0]).length, 2 * model.numLayers)
  t.ok(first.loaded, 'a new row is loaded from its host copy')
  const tokens = [ref.tokens[0], row.took(first, 0).got]
  const rest = stepTogether(step, [row], STEPS - 1)
  tokens.push(...rest.got[0])
  t.same(tokens, ref.tokens, `the CPU's ${STEPS + 1} greedy tokens`)
  t.same(rest.loads, new Array(STEPS - 1).fill(false), 'the row stays held: every later step is a replay alone')
  t.ok(rest.worstDelta < 1e-4, `each step's new keys and values within ${rest.worstDelta.toExponential(1)} of the CPU's`)
  t.ok(step.holds(row.key, PROMPT.length + STEPS), 'it holds the row and its positions')

  // Another row takes the slot; the first comes back from its host copy at step 5 and goes on alike.
  const other = new HostRow(ref, 0, model.numKvHeads, model.headDim)
  t.ok(step.step([other.stepRow]).loaded)
  t.notOk(step.holds(row.key, PROMPT.length + STEPS), 'the slot no longer holds the first row')
  const back = new HostRow(ref, 5, model.numKvHeads, model.headDim)
  const again = stepTogether(step, [back], STEPS - 5)
  t.same(again.got[0], ref.tokens.slice(6), 'loaded again from the host\'s copy, the same tokens')
  t.same(again.loads, [true, ...new Array(STEPS - 6).fill(false)])

  t.throws(() => step.step([{ ...back.stepRow, length: 64 }]), /cannot take a row of 64/, 'a row as long as its buffers is refused (no room for its next token)')
  t.throws(() => step.step([back.stepRow, other.stepRow]), /takes 1 to 1 rows \(got 2\)/)
})

t.test('several rows of different lengths step together, each its own tokens: rows leaving reload nothing, a row joining reloads the rows', async t => {
  if (!await needWebgpu(t)) return
  const dir = randomCaptureStepModelDir()
  const model = readModelDir(dir, 'q4')
  const story = await cpuReference(dir)
  const other = await cpuReference(dir, [256, 76, 105, 108, 121, 32, 104, 97, 100, 10])
  t.not(story.tokens.join(), other.tokens.join(), 'two prompts with replies of their own')
  const step = CapturedStep.open(model, 48, 3)
  t.teardown(() => step.close())
  t.equal(step.cacheBytes, 2 * model.numLayers * 3 * model.numKvHeads * 48 * model.headDim * 4, 'three rows\' buffers')
  const { numKvHeads: heads, headDim: dim } = model
  // Three rows of three lengths: the story from its prompt, the story 4 steps in, the other prompt.
  const a = new HostRow(story, 0, heads, dim)
  const b = new HostRow(story, 4, heads, dim)
  const c = new HostRow(other, 0, heads, dim)
  t.ok(new Set([a.length, b.length, c.length]).size === 3, `rows of ${a.length}, ${b.length} and ${c.length} positions`)
  const longest = Math.max(a.length, b.length, c.length)
  const three = stepTogether(step, [a, b, c], 3)
  t.same(three.got, three.want, 'three rows: each one\'s own greedy tokens')
  t.same(three.loads, [true, false, false], 'loaded once, then replays alone')
  t.equal(step.stagingBytes, 3 * heads * longest * dim * 4, 'the host staged the three rows, each as long as the longest, and no more')
  t.ok(three.worstDelta < 1e-4, `new keys and values within ${three.worstDelta.toExponential(1)} of the CPU's`)
  // b leaves: a and c go on in their slots, nothing reloaded, and the slot b held computes nothing of theirs.
  const two = stepTogether(step, [c, a], 3)
  t.same(two.got, two.want, 'two rows, in another order: their tokens')
  t.same(two.loads, [false, false, false], 'a row leaving reloads nothing')
  t.notOk(step.holds(b.key, b.length), 'the slot of the row that left is let go')
  // d joins: every row loads again from the host copies, which the replays' new keys and values kept.
  const d = new HostRow(other, 2, heads, dim)
  const joined = stepTogether(step, [a, d, c], 3)
  t.same(joined.got, joined.want, 'a row joining: every row\'s tokens, the others from their host copies')
  t.same(joined.loads, [true, false, false])
  t.ok(step.stagingBytes <= 3 * heads * 48 * dim * 4, 'grown as loads needed, never past the buffers\' size')
  // Exact copies share a key: each still takes a slot of its own.
  const twin = new HostRow(story, 1, heads, dim)
  const copy = { ...twin.stepRow, buffers: twin.stepRow.buffers }
  const both = step.step([twin.stepRow, copy])
  t.equal(argmax(both.logits[0]), story.tokens[2])
  t.equal(argmax(both.logits[1]), story.tokens[2], 'two rows of one key: the same token, each in its own slot')
  t.ok(both.loaded)
  t.throws(() => step.step([a.stepRow, b.stepRow, c.stepRow, d.stepRow]), /takes 1 to 3 rows \(got 4\)/)
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
  t.equal(on.captureRows, 1, 'one row unless asked for more')
  await on.close()
  // A row no request takes costs a replay its work all the same: no more rows than decode together.
  const rows = await LocalEngine.load({ modelDir: randomCaptureStepModelDir(), dtype: 'q4', device: 'webgpu', threads: 1, webgpuCapture: 96, webgpuCaptureRows: 16, maxBatch: 4 }, events)
  t.equal(rows.captureRows, 4, 'ONNX_WEBGPU_CAPTURE_ROWS within MAX_BATCH')
  await rows.close()
  // Its buffers take GPU memory for every position: never more than one sequence may hold.
  const capped = await LocalEngine.load({ modelDir: randomCaptureStepModelDir(), dtype: 'q4', device: 'webgpu', threads: 1, webgpuCapture: 4096, contextLength: 80 }, events)
  t.equal(capped.capturePositions, 80, 'models.json\'s contextLength bounds it')
  await capped.close()
  const budgeted = await LocalEngine.load({ modelDir: randomCaptureStepModelDir(), dtype: 'q4', device: 'webgpu', threads: 1, webgpuCapture: 4096, kvCacheBytes: 200 * kvBytesPerToken(readModelDir(randomCaptureStepModelDir(), 'q4'), 'float32') }, events)
  t.equal(budgeted.capturePositions, 200 - SLOT_SLACK, 'and so does the KV budget')
  await budgeted.close()
  const off = await LocalEngine.load({ modelDir: randomCaptureStepModelDir(), dtype: 'q4', device: 'webgpu', threads: 1 }, events)
  t.equal(off.capturePositions, 0, 'off unless asked for')
  t.equal(off.captureRows, 0)
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
  const reply = async (settings: { webgpuCapture?: number; webgpuCaptureRows?: number }): Promise<{ text: string; positions?: number; rows?: number; replayed?: number; decoded?: number }> => {
    const backend = new OnnxBackend({ id: 'capture', path: dir, dtype: 'q4', device: 'webgpu', threads: 1, ...settings })
    try {
      await backend.load()
      let text = ''
      for await (const e of backend.generate(request, new AbortController().signal)) if (e.type === 'delta') text += (e.reasoning ?? '') + (e.content ?? '')
      const stats = backend.engineStats
      return { text, positions: backend.capturePositions, rows: backend.captureRows, replayed: stats?.replayedTokens, decoded: stats?.stepTokens.decode }
    } finally {
      await backend.close()
    }
  }
  const plain = await reply({})
  const captured = await reply({ webgpuCapture: 256, webgpuCaptureRows: 2 })
  t.equal(plain.positions, 0)
  t.equal(captured.positions, 256, 'the worker says the step is open (the "model ready" line\'s capturePositions)')
  t.equal(captured.rows, 2, 'and its rows (captureRows)')
  t.equal(plain.replayed, 0, 'the engine\'s stats: nothing replayed without the step')
  t.ok((captured.replayed ?? 0) > 0 && captured.replayed === captured.decoded, `every decode step replayed (${captured.replayed} tokens), as /metrics reads it (chatd_engine_replayed_tokens_total)`)
  t.ok(plain.text.length > 0)
  t.equal(captured.text, plain.text, 'the same reply, greedy')
})
