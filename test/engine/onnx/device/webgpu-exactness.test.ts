// The WebGPU device gives the CPU provider's tokens, token for token: the same
// requests, greedy, on ONNX_DEVICE=cpu and ONNX_DEVICE=webgpu, compared whole.
// On CI WebGPU runs on Mesa's lavapipe (software Vulkan, slow), so this file is
// the representative set rather than every local-model test twice, on stories260k:
//   - fp32 and int4 (float compute) concat graphs, whose cache stays in GPU
//     memory between steps: one request alone, three together, and one joining
//     another mid-decode (its cache gathered on the host and uploaded once);
//   - the same fp32 weights as an append graph (the cache on the host);
//   - a conversation with the prefix cache and the next turn computed ahead;
//   - the device layout's gathers (rows regrouped, a prefix cut), step by step,
//     against the host's concat layout.
// int4 graphs that compute with int8 activations (the CPU default) are not in
// it: the WebGPU provider computes int4 products in float, so such a graph gives
// other tokens on a GPU by design (docs/models.md).
import t, { type Test } from 'tap'
import type { ChatMessage, GenerateRequest } from '../../../../src/engine/backend.ts'
import { cacheLayoutFor, type CacheLayout, type RowCache } from '../../../../src/engine/onnx/cache/kv-cache.ts'
import { DecoderSession } from '../../../../src/engine/onnx/device/decoder-session.ts'
import type { Device } from '../../../../src/engine/onnx/device/providers.ts'
import { readModelDir, type ModelDtype } from '../../../../src/engine/onnx/model-dir.ts'
import { LocalEngine } from '../../../../src/engine/onnx/scheduler/engine.ts'
import { nextTurnStart } from '../../../../src/prompt/shape.ts'
import { USER_TURNS } from '../../../helpers/engine-harness.ts'
import { storiesModelDir } from '../../../helpers/models.ts'
import { needWebgpu } from '../../../helpers/webgpu.ts'

interface Reply { text: string; completion: number; cached: number }

/** An engine in this thread on `device`, with a promise per request and a callback on each delta. */
async function engineOn (t: Test, dir: string, dtype: ModelDtype, device: Device) {
  const texts = new Map<string, string>()
  const done = new Map<string, (r: Reply) => void>()
  const onDelta = new Map<string, () => void>()
  const engine = await LocalEngine.load({ modelDir: dir, dtype, device, threads: 2 }, {
    delta: (id, text) => {
      texts.set(id, (texts.get(id) ?? '') + text.reasoning + text.content)
      onDelta.get(id)?.()
    },
    finish: (id, _reason, usage) => done.get(id)?.({ text: texts.get(id) ?? '', completion: usage.completion_tokens, cached: usage.prompt_tokens_details?.cached_tokens ?? 0 }),
    error: (_id, err) => { throw err },
  })
  t.teardown(() => engine.close())
  let n = 0
  const generate = (messages: ChatMessage[], maxTokens: number, deltas?: () => void): Promise<Reply> => {
    const id = `r${n++}`
    if (deltas) onDelta.set(id, deltas)
    const result = new Promise<Reply>(resolve => done.set(id, resolve))
    engine.start({ messages, temperature: 0, topP: 1, topK: 0, stop: [], maxTokens } satisfies GenerateRequest, id)
    return result
  }
  return { engine, generate }
}

const user = (content: string): ChatMessage[] => [{ role: 'user', content }]

/** One request alone; three together; one joining another after that one's fourth token. */
async function batches (t: Test, dir: string, dtype: ModelDtype, device: Device) {
  const { engine, generate } = await engineOn(t, dir, dtype, device)
  const solo = await generate(user(USER_TURNS[0]), 40)
  const together = await Promise.all([
    generate(user('Once upon a time'), 30),
    generate(user('The little dog ran to the park and saw a big red ball. He'), 30),
    generate(user('Lily'), 30),
  ])
  let joined: Promise<Reply> | undefined
  let tokens = 0
  const first = generate(user(USER_TURNS[1]), 36, () => {
    if (++tokens === 4) joined = generate(user(USER_TURNS[2]), 24)
  })
  const join = [await first, await joined!]
  return { device: engine.session.device, cacheOnDevice: engine.session.cacheOnDevice, replies: { solo, together, join } }
}

const MODELS: Array<{ name: string; dir: () => string; dtype: ModelDtype; cacheOnDevice: boolean }> = [
  { name: 'fp32 concat graph (the cache in GPU memory)', dir: () => storiesModelDir('fp32', 'concat'), dtype: 'fp32', cacheOnDevice: true },
  { name: 'int4 concat graph, float compute (the cache in GPU memory)', dir: () => storiesModelDir('int4', 'concat', 'float'), dtype: 'q4', cacheOnDevice: true },
  { name: 'fp32 append graph (the cache on the host)', dir: () => storiesModelDir('fp32'), dtype: 'fp32', cacheOnDevice: false },
]

for (const model of MODELS) {
  t.test(`${model.name}: solo, batched and joining mid-decode, the CPU's tokens`, async t => {
    if (!await needWebgpu(t)) return
    const cpu = await batches(t, model.dir(), model.dtype, 'cpu')
    const gpu = await batches(t, model.dir(), model.dtype, 'webgpu')
    t.equal(gpu.device, 'webgpu')
    t.equal(gpu.cacheOnDevice, model.cacheOnDevice, `the cache ${model.cacheOnDevice ? 'stays in GPU memory' : 'is kept on the host'}`)
    t.ok(cpu.replies.solo.completion === 40 && cpu.replies.together.every(r => r.completion === 30), 'the replies run to max_tokens: every token is compared')
    t.same(gpu.replies, cpu.replies, 'every reply, token for token')
  })
}

/** Four turns, each reply's conversation computed ahead before the next turn (as the server does). */
async function conversation (t: Test, device: Device) {
  const { engine, generate } = await engineOn(t, storiesModelDir('fp32', 'concat'), 'fp32', device)
  const messages: ChatMessage[] = []
  const replies: Reply[] = []
  for (const [i, turn] of USER_TURNS.entries()) {
    messages.push({ role: 'user', content: turn })
    const reply = await generate([...messages], 24)
    replies.push(reply)
    // Turn 3 starts from the prefix cache alone; the others from the conversation computed ahead.
    if (i !== 1) engine.prepareNextTurn(nextTurnStart([...messages], reply.text))
    messages.push({ role: 'assistant', content: reply.text })
    await engine.idle()
  }
  return { replies, ahead: engine.tokensComputedAhead }
}

t.test('a conversation with the prefix cache and the next turn computed ahead (fp32 concat graph): the CPU\'s tokens and cached counts', async t => {
  if (!await needWebgpu(t)) return
  const cpu = await conversation(t, 'cpu')
  const gpu = await conversation(t, 'webgpu')
  t.ok(cpu.replies.slice(1).every(r => r.cached > 0), 'every later turn reuses cached positions')
  t.ok(cpu.ahead > 0, 'positions were computed ahead')
  t.same(gpu, cpu, 'replies, cached positions and positions computed ahead')
})

/** Feeds the same runs through a layout; returns every run's logits. */
async function layoutRuns (t: Test, layout: CacheLayout): Promise<Float32Array[]> {
  const logits: Float32Array[] = []
  const run = async (cache: RowCache, tokens: number[][]): Promise<RowCache> => {
    const out = await layout.run(cache, tokens, 1)
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
  t.equal(layout.bytesHeld, 0, 'every cache freed, host and device')
  return logits
}

t.test('the device layout\'s gathers (rows joining, regrouped, a prefix cut) continue as the host\'s concat layout does', async t => {
  if (!await needWebgpu(t)) return
  const model = readModelDir(storiesModelDir('fp32', 'concat'), 'fp32')
  const cpu = await DecoderSession.load(model, { device: 'cpu', threads: 1 })
  const gpu = await DecoderSession.load(model, { device: 'webgpu', threads: 1 })
  t.teardown(async () => { await cpu.close(); await gpu.close() })
  t.ok(gpu.cacheOnDevice && !cpu.cacheOnDevice)
  const expected = await layoutRuns(t, cacheLayoutFor(cpu))
  const got = await layoutRuns(t, cacheLayoutFor(gpu))
  t.equal(got.length, expected.length)
  let worst = 0
  got.forEach((logits, i) => {
    for (let k = 0; k < logits.length; k++) worst = Math.max(worst, Math.abs(logits[k] - expected[i][k]))
  })
  t.ok(worst < 1e-3, `max |webgpu - cpu| over every run's logits = ${worst.toExponential(2)}`)
})
