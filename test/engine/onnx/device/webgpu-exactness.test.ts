// The WebGPU device gives the CPU provider's tokens, token for token: the same
// requests, greedy, on ONNX_DEVICE=cpu and ONNX_DEVICE=webgpu, compared whole.
// On CI WebGPU runs on Mesa's lavapipe (software Vulkan, slow), so this file is
// the representative set rather than every local-model test twice, on stories260k
// (the scenarios are scripts/bench/exactness.ts's, which scripts/gpu-check.sh
// also runs on a real GPU):
//   - stories260k's public goldens (the reference implementation's greedy
//     continuations) on WebGPU, the cache in GPU memory and on the host;
//   - fp32 and int4 (float compute) concat graphs, whose cache stays in GPU
//     memory between steps: one request alone, three together, and one joining
//     another mid-decode (its cache gathered on the host and uploaded once);
//   - the same fp32 weights as an append graph (the cache on the host);
//   - a conversation with the prefix cache and the next turn computed ahead;
//   - the form for GPU hosts (gqa-masked) on a random model: solo, batched,
//     joining, and a conversation; and with the capture step (ONNX_WEBGPU_CAPTURE),
//     a row a step and several (ONNX_WEBGPU_CAPTURE_ROWS);
//   - a GroupQueryAttention graph as onnxruntime-genai writes them (positions
//     from the mask), solo, batched and joining;
//   - the device layout's gathers (rows regrouped, a prefix cut), step by step,
//     against the host's concat layout.
// int4 graphs that compute with int8 activations (the CPU default) are not in
// it: the WebGPU provider computes int4 products in float, so such a graph gives
// other tokens on a GPU by design (docs/models.md).
import t, { type Test } from 'tap'
import { batches, conversation, goldens, goldensOn, tokensOf } from '../../../../scripts/bench/exactness.ts'
import { cacheLayoutFor, type CacheLayout, type CacheRoom, type RowCache } from '../../../../src/engine/onnx/cache/kv-cache.ts'
import { DecoderSession } from '../../../../src/engine/onnx/device/decoder-session.ts'
import { readModelDir, type ModelDtype } from '../../../../src/engine/onnx/model-dir.ts'
import { randomCaptureStepModelDir, randomGpuFormModelDir, randomGqaModelDir, storiesModelDir } from '../../../helpers/models.ts'
import { needWebgpu } from '../../../helpers/webgpu.ts'

/**
 * `plansDiffer`: on a software renderer the devices schedule a GroupQueryAttention graph's prompts
 * differently (tokensOf). `endsEarly`: the model's end-of-sequence token ends a reply before max_tokens.
 * `inPlace`: the cache is kept in place in GPU memory (DecoderSession.cacheInPlace).
 */
const MODELS: Array<{ name: string; dir: () => string; dtype: ModelDtype; cacheOnDevice: boolean; plansDiffer?: boolean; endsEarly?: boolean; inPlace?: boolean }> = [
  { name: 'fp32 concat graph (the cache in GPU memory)', dir: () => storiesModelDir('fp32', 'concat'), dtype: 'fp32', cacheOnDevice: true },
  { name: 'int4 concat graph, float compute (the cache in GPU memory)', dir: () => storiesModelDir('int4', 'concat', 'float'), dtype: 'q4', cacheOnDevice: true },
  { name: 'fp32 append graph (the cache on the host)', dir: () => storiesModelDir('fp32'), dtype: 'fp32', cacheOnDevice: false },
  // The form for GPU hosts (attention's core in GroupQueryAttention under the mask), on a random
  // model with heads 16 wide (stories260k's are 8, which GroupQueryAttention does not take).
  { name: 'int4 gqa-masked graph, float compute (the GPU form; the cache in GPU memory)', dir: () => randomGpuFormModelDir('int4'), dtype: 'q4', cacheOnDevice: true, inPlace: true, plansDiffer: true },
  // onnxruntime-genai's style (GroupQueryAttention with its own rotary, positions from the mask),
  // as users' files may have it: the cache on the host, prompts in 31-token runs on a software renderer.
  { name: 'fp32 GroupQueryAttention graph (onnxruntime-genai style; the cache on the host)', dir: () => randomGqaModelDir('fp32'), dtype: 'fp32', cacheOnDevice: false, plansDiffer: true, endsEarly: true },
]

for (const cacheStyle of ['concat', 'append'] as const) {
  t.test(`stories260k's public goldens on WebGPU (${cacheStyle} graph, the cache ${cacheStyle === 'concat' ? 'in GPU memory' : 'on the host'}), token for token`, async t => {
    if (!await needWebgpu(t)) return
    const gpu = await goldensOn(storiesModelDir('fp32', cacheStyle), 'webgpu')
    t.equal(gpu.device, 'webgpu')
    t.equal(gpu.cacheOnDevice, cacheStyle === 'concat')
    t.same(gpu.same, goldens.map(() => true), 'every golden\'s tokens')
    t.same(gpu.cached, goldens.map(g => [g.prompt_ids.length + g.generated_ids.length - 1]), 'every fed token is cached')
  })
}

for (const model of MODELS) {
  t.test(`${model.name}: solo, batched and joining mid-decode, the CPU's tokens`, async t => {
    if (!await needWebgpu(t)) return
    const cpu = await batches(model.dir(), model.dtype, 'cpu')
    const gpu = await batches(model.dir(), model.dtype, 'webgpu')
    t.equal(gpu.device, 'webgpu')
    t.equal(gpu.cacheOnDevice, model.cacheOnDevice, `the cache ${model.cacheOnDevice ? 'stays in GPU memory' : 'is kept on the host'}`)
    t.equal(gpu.cacheInPlace, model.inPlace === true, model.inPlace ? 'kept in place: each run writes into the cache\'s GPU buffers' : 'each run returns a new cache')
    if (model.endsEarly) t.ok([cpu.replies.solo, ...cpu.replies.together].every(r => r.completion >= 20), 'the replies run to max_tokens or to the end-of-sequence token, 20 or more each')
    else t.ok(cpu.replies.solo.completion === 40 && cpu.replies.together.every(r => r.completion === 30), 'the replies run to max_tokens: every token is compared')
    if (!model.plansDiffer || !gpu.softwareRenderer) {
      t.same(gpu.replies, cpu.replies, 'every reply, token for token, and the cached counts')
      return
    }
    t.same(tokensOf(gpu.replies), tokensOf(cpu.replies), 'every reply, token for token')
  })
}

t.test('a conversation with the prefix cache and the next turn computed ahead (fp32 concat graph): the CPU\'s tokens and cached counts', async t => {
  if (!await needWebgpu(t)) return
  const dir = storiesModelDir('fp32', 'concat')
  const cpu = await conversation(dir, 'fp32', 'cpu')
  const gpu = await conversation(dir, 'fp32', 'webgpu')
  t.ok(cpu.replies.slice(1).every(r => r.cached > 0), 'every later turn reuses cached positions')
  t.ok(cpu.ahead > 0, 'positions were computed ahead')
  t.same(gpu, cpu, 'replies, cached positions and positions computed ahead')
})

t.test('a conversation on the GPU form (gqa-masked, int4): the CPU\'s tokens and cached counts', async t => {
  if (!await needWebgpu(t)) return
  const dir = randomGpuFormModelDir('int4')
  const cpu = await conversation(dir, 'q4', 'cpu')
  const gpu = await conversation(dir, 'q4', 'webgpu')
  t.ok(cpu.replies.slice(1).every(r => r.cached > 0), 'every later turn reuses cached positions')
  t.same(gpu, cpu, 'replies, cached positions and positions computed ahead')
})

t.test('the GPU form with the capture step (ONNX_WEBGPU_CAPTURE): a request decoding alone replays its recorded step, the CPU\'s tokens and cached counts', async t => {
  if (!await needWebgpu(t)) return
  const dir = randomCaptureStepModelDir()
  const cpu = await batches(dir, 'q4', 'cpu')
  // The tiny model's tokenizer is byte-level: a turn is ~100 positions, a conversation ~600.
  const gpu = await batches(dir, 'q4', 'webgpu', { webgpuCapture: 1024 })
  t.same(tokensOf(gpu.replies), tokensOf(cpu.replies), 'alone, three together, and one joining another (its row leaving the capture step and coming back from the host\'s copy): every reply, token for token')
  // The lone request's 39 steps, the joined pair's once one of them is alone, and more.
  t.ok((gpu.capturedSteps ?? 0) >= 39 + 12, `${gpu.capturedSteps} steps replayed`)
  const cpuTalk = await conversation(dir, 'q4', 'cpu')
  const gpuTalk = await conversation(dir, 'q4', 'webgpu', { webgpuCapture: 1024 })
  t.ok(cpuTalk.replies.slice(1).every(r => r.cached > 0), 'every later turn reuses cached positions')
  t.same(gpuTalk.replies, cpuTalk.replies, 'a conversation: the replies and cached positions (the prefix cache reads the host\'s copy, which each replayed step wrote)')
  t.equal(gpuTalk.ahead, cpuTalk.ahead)
  t.ok((gpuTalk.capturedSteps ?? 0) >= 4 * 23, `${gpuTalk.capturedSteps} steps replayed`)
  // Too short for these requests: they take the usual steps, with the same tokens.
  const short = await batches(dir, 'q4', 'webgpu', { webgpuCapture: 8 })
  t.same(tokensOf(short.replies), tokensOf(cpu.replies), 'rows longer than the capture step\'s cache take the usual steps')
  t.equal(short.capturedSteps, 0)
})

t.test('the capture step taking several rows (ONNX_WEBGPU_CAPTURE_ROWS): requests decoding together replay one recorded step, the CPU\'s tokens', async t => {
  if (!await needWebgpu(t)) return
  const dir = randomCaptureStepModelDir()
  const cpu = await batches(dir, 'q4', 'cpu')
  const gpu = await batches(dir, 'q4', 'webgpu', { webgpuCapture: 1024, webgpuCaptureRows: 4 })
  t.same(tokensOf(gpu.replies), tokensOf(cpu.replies), 'alone, three together, and one joining another: every reply, token for token')
  // The lone request's 39 steps and every decode step of the three together (29 each), where one row alone took them before.
  t.ok((gpu.capturedSteps ?? 0) >= 39 + 3 * 29, `${gpu.capturedSteps} tokens decoded on replays`)
  const cpuTalk = await conversation(dir, 'q4', 'cpu')
  const gpuTalk = await conversation(dir, 'q4', 'webgpu', { webgpuCapture: 1024, webgpuCaptureRows: 4 })
  t.same(gpuTalk.replies, cpuTalk.replies, 'a conversation: the replies and cached positions')
  t.equal(gpuTalk.ahead, cpuTalk.ahead)
  // Fewer rows than decode together: three take the usual steps until they are two, then the replay.
  const two = await batches(dir, 'q4', 'webgpu', { webgpuCapture: 1024, webgpuCaptureRows: 2 })
  t.same(tokensOf(two.replies), tokensOf(cpu.replies), 'two rows: every reply, token for token, moving between the usual steps and the replay')
  t.ok((two.capturedSteps ?? 0) > 39 + 2 * 23, `${two.capturedSteps} tokens decoded on replays`)
})

/**
 * Feeds the same runs through a layout; returns every run's logits. `chunk`: the long prompt's
 * tokens a run; token ids are taken modulo `vocab`.
 */
async function layoutRuns (t: Test, layout: CacheLayout, { chunk = 40, vocab = 512 } = {}): Promise<Float32Array[]> {
  const logits: Float32Array[] = []
  const run = async (cache: RowCache, tokens: number[][], room?: CacheRoom): Promise<RowCache> => {
    const out = await layout.run(cache, tokens.map(row => row.map(id => id % vocab)), 1, false, room)
    logits.push(out.logits.slice())
    return out.cache
  }
  // Two rows of different lengths (the second left-padded), two decode steps.
  let a = await run(layout.empty(1), [[1, 300, 400, 17, 90]])
  let b = await run(layout.empty(1), [[1, 45, 80]])
  let both: RowCache = layout.gather([{ cache: a, row: 0 }, { cache: b, row: 0 }])
  layout.free(a)
  layout.free(b)
  both = await run(both, [[33], [71]])
  both = await run(both, [[250], [12]])
  // Regrouped: the second row first, and the first cut back to its first three positions.
  const regrouped = layout.gather([{ cache: both, row: 1 }, { cache: both, row: 0, length: 3 }])
  layout.free(both)
  a = await run(regrouped, [[5], [9]])
  b = await run(a, [[60], [61]])
  layout.free(b)
  // A first run of rows of different lengths (the shorter left-padded in the run), a step, then
  // one row regrouped from the host's copy, which must hold the real tokens' entries only.
  let pair: RowCache = await run(layout.empty(2), [[1, 300, 400, 17, 90], [1, 45, 80]])
  pair = await run(pair, [[33], [71]])
  const second = layout.gather([{ cache: pair, row: 1 }])
  layout.free(pair)
  layout.free(await run(second, [[12]]))
  // A prompt in chunks past several capacity steps, the host's copy growing ahead (room: the row's
  // reservation), then a row regrouped from that copy, which must hold every position.
  let long: RowCache = layout.empty(1)
  for (let k = 0; k < 5; k++) long = await run(long, [Array.from({ length: chunk }, (_, i) => 260 + (((k * chunk + i) * 37) % 200))], { most: 300 })
  const copied = layout.gather([{ cache: long, row: 0 }])
  layout.free(long)
  layout.free(await run(copied, [[12]]))
  t.equal(layout.bytesHeld, 0, 'every cache freed, host and device')
  return logits
}

for (const form of ['fp32 concat graph', 'the GPU form (gqa-masked, fp32), its cache kept in place'] as const) {
  t.test(`the device layout's gathers (rows joining, regrouped, a prefix cut) and growth continue as the host's concat layout does: ${form}`, async t => {
    if (!await needWebgpu(t)) return
    const inPlace = form !== 'fp32 concat graph'
    const model = readModelDir(inPlace ? randomGpuFormModelDir('fp32') : storiesModelDir('fp32', 'concat'), 'fp32')
    const cpu = await DecoderSession.load(model, { device: 'cpu', threads: 1 })
    const gpu = await DecoderSession.load(model, { device: 'webgpu', threads: 1 })
    t.teardown(async () => { await cpu.close(); await gpu.close() })
    t.ok(gpu.cacheOnDevice && !cpu.cacheOnDevice)
    t.equal(gpu.cacheInPlace, inPlace)
    // The GPU form's runs keep to 31 tokens (tokensPerRunLimit on lavapipe) and its vocabulary of 320.
    const options = inPlace ? { chunk: 31, vocab: 320 } : {}
    const expected = await layoutRuns(t, cacheLayoutFor(cpu), options)
    const got = await layoutRuns(t, cacheLayoutFor(gpu), options)
    t.equal(got.length, expected.length)
    let worst = 0
    got.forEach((logits, i) => {
      for (let k = 0; k < logits.length; k++) worst = Math.max(worst, Math.abs(logits[k] - expected[i][k]))
    })
    t.ok(worst < 1e-3, `max |webgpu - cpu| over every run's logits = ${worst.toExponential(2)}`)
  })
}

t.test('the GPU form kept in place: decode steps write into the cache\'s buffers, made again only when their room runs out, with twice the room', async t => {
  if (!await needWebgpu(t)) return
  const gpu = await DecoderSession.load(readModelDir(randomGpuFormModelDir('fp32'), 'fp32'), { device: 'webgpu', threads: 1 })
  t.teardown(() => gpu.close())
  t.ok(gpu.cacheInPlace)
  const layout = cacheLayoutFor(gpu)
  /** The cache's GPU buffer for layer 0's keys. */
  const keys = (cache: RowCache) => (cache as unknown as { device: { tensors: Record<string, { dims: number[] }> } }).device.tensors['past_key_values.0.key']
  // An 8-token prompt: buffers with room for 64 more, rounded to 64 positions.
  let cache: RowCache = (await layout.run(layout.empty(1), [[1, 5, 9, 17, 33, 65, 129, 200]], 1)).cache
  const first = keys(cache)
  t.equal(first.dims[2], 128, 'room for 128 positions')
  let token = 7
  let kept = true
  for (let length = 9; length <= 128; length++) {
    cache = (await layout.run(cache, [[token]], 1)).cache
    token = (token * 31 + 11) % 320
    kept &&= keys(cache) === first
  }
  t.ok(kept, 'every decode step up to 128 positions wrote into the same buffers')
  cache = (await layout.run(cache, [[token]], 1)).cache
  t.not(keys(cache), first, 'the 129th position: new buffers')
  t.equal(keys(cache).dims[2], 256, 'with twice the room')
  layout.free(cache)
  // The first chunk of a 300-token prompt: room for the whole prompt and its first token at once, within the reservation.
  const chunked = (await layout.run(layout.empty(1), [[1, 5, 9, 17, 33, 65, 129, 200]], 1, true, { most: 1000, least: 301 })).cache
  t.equal(keys(chunked).dims[2], 320, 'room for the prompt\'s end, rounded to 64 positions')
  t.equal((chunked as RowCache & { capacity: number }).capacity, 320, 'the host\'s copy alike')
  layout.free(chunked)
  const reserved = (await layout.run(layout.empty(1), [[1, 5, 9]], 1, true, { most: 100, least: 301 })).cache
  t.equal(keys(reserved).dims[2], 128, 'never past the reservation (rounded up) for a prompt\'s end')
  layout.free(reserved)
  // A cached prefix taken for a prompt and its reply: the host's copy and the GPU buffers made at its first run have their room.
  const prefix = (await layout.run(layout.empty(1), [[1, 5, 9, 17, 33, 65, 129, 200]], 1, true)).cache
  const taken = layout.gather([{ cache: prefix, row: 0, length: 6 }], 400)
  layout.free(prefix)
  t.equal((taken as RowCache & { capacity: number }).capacity, 448, 'the host\'s copy: room for 400, rounded to 64')
  const continued = (await layout.run(taken, [[7, 8]], 1, true, { most: 1000 })).cache
  t.equal(keys(continued).dims[2], 448, 'its GPU buffers alike')
  layout.free(continued)
  t.equal(layout.bytesHeld, 0, 'every buffer freed')
})
