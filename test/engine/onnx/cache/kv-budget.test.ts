// Context length and the KV cache's memory budget: the usable context is the
// smallest of the model's own limits and the operator's; a burst of long
// requests waits for cache room instead of growing the cache without bound.
import fs from 'node:fs'
import path from 'node:path'
import t, { type Test } from 'tap'
import type { FinishReason, GenerateRequest } from '../../../../src/engine/backend.ts'
import { OnnxBackend } from '../../../../src/engine/onnx/backend.ts'
import type { ForwardInput } from '../../../../src/engine/onnx/device/decoder-session.ts'
import { LocalEngine, type EngineSettings } from '../../../../src/engine/onnx/scheduler/engine.ts'
import { defaultKeptBytes, KvBudget, kvBytesPerToken } from '../../../../src/engine/onnx/cache/kv-budget.ts'
import { readModelDir } from '../../../../src/engine/onnx/model-dir.ts'
import { STORIES_OPTIMUM, storiesModelDir } from '../../../helpers/models.ts'
import { startStoriesServer } from '../../../helpers/stories-server.ts'
import { referenceDevice, testDevice } from '../../../helpers/webgpu.ts'

interface Outcome { text: string; reason: FinishReason; completion: number }

/** A copy of the onnx-community-form stories260k with tokenizer_config.json's model_max_length changed. */
function withTrainedLength (dir: string, modelMaxLength: number): string {
  fs.cpSync(STORIES_OPTIMUM, dir, { recursive: true })
  for (const file of fs.readdirSync(dir, { recursive: true }) as string[]) fs.chmodSync(path.join(dir, file), 0o755)
  const file = path.join(dir, 'tokenizer_config.json')
  fs.writeFileSync(file, JSON.stringify({ ...JSON.parse(fs.readFileSync(file, 'utf8')), model_max_length: modelMaxLength }))
  return dir
}

async function loaded (t: Test, opts: { path: string; contextLength?: number; kvCacheBytes?: number }): Promise<OnnxBackend> {
  const backend = new OnnxBackend({ id: 'm', dtype: 'fp32', device: testDevice(), threads: 1, ...opts })
  await backend.load()
  t.teardown(() => backend.close())
  return backend
}

t.test('context length: the smallest of max_position_embeddings, model_max_length, models.json contextLength and the KV budget', async t => {
  const dirs = t.testdir({ trained300: {} })
  t.equal(readModelDir(STORIES_OPTIMUM, 'fp32').contextLength, 512, 'max_position_embeddings 512, model_max_length 512')
  const trained = withTrainedLength(path.join(dirs, 'trained300'), 300)
  t.equal(readModelDir(trained, 'fp32').contextLength, 300, 'model_max_length 300 is the smaller')
  t.equal((await loaded(t, { path: trained })).contextLength, 300)
  t.equal((await loaded(t, { path: trained, contextLength: 200 })).contextLength, 200, 'models.json contextLength lowers it')
  t.equal((await loaded(t, { path: trained, contextLength: 4000 })).contextLength, 300, 'but never raises it')
  // stories260k caches 5 layers x 2 x 4 kv heads x 8 dims x 4 bytes = 1280 bytes per position.
  const perToken = kvBytesPerToken(readModelDir(STORIES_OPTIMUM, 'fp32'), 'float32')
  t.equal(perToken, 1280)
  t.equal((await loaded(t, { path: trained, kvCacheBytes: 164 * perToken })).contextLength, 100, 'a budget of 164 positions holds a 100-token sequence and its 64 slots of slack')
  const tiny = new OnnxBackend({ id: 'tiny', path: trained, dtype: 'fp32', device: testDevice(), threads: 1, kvCacheBytes: 10 * perToken })
  await t.rejects(tiny.load(), /the KV cache budget .* cannot hold one sequence of this model \(1280 bytes per position\): raise KV_CACHE_MB/)
  await tiny.close()
})

t.test('GET /api/v1/models/{id} reports the usable context length', async t => {
  const key = `sk-chatd-${'contextLen'.repeat(3)}ab`
  const { url } = await startStoriesServer(t, { modelId: 'stories', key, env: { KV_CACHE_MB: '1' }, threads: 1 })
  const res = await fetch(`${url}/api/v1/models/stories`, { headers: { authorization: `Bearer ${key}` } })
  const body = await res.json() as { context_length?: number }
  t.equal(body.context_length, 512, 'stories260k: 512 positions (1 MiB of KV budget holds 819)')
  const list = await (await fetch(`${url}/api/v1/models`, { headers: { authorization: `Bearer ${key}` } })).json() as { data: Array<{ context_length?: number }> }
  t.equal(list.data[0].context_length, 512)
})

/** An in-thread engine on `dir`, recording the rows of every run and the cache bytes held after it. */
async function engineFor (dir: string, settings: Partial<EngineSettings>) {
  const texts = new Map<string, string>()
  const done = new Map<string, (o: Outcome) => void>()
  const engine = await LocalEngine.load({ modelDir: dir, dtype: 'fp32', device: testDevice(), threads: 1, prefillChunk: 8, ...settings }, {
    delta: (id, text) => texts.set(id, (texts.get(id) ?? '') + text.content + text.reasoning),
    finish: (id, reason, usage) => done.get(id)?.({ text: texts.get(id) ?? '', reason, completion: usage.completion_tokens }),
    error: (_id, err) => { throw err },
  })
  const rows: number[] = []
  const held: number[] = []
  const forward = engine.session.forward.bind(engine.session)
  engine.session.forward = async (input: ForwardInput) => {
    const out = await forward(input)
    rows.push(input.batch)
    queueMicrotask(() => held.push(engine.cacheLayout.bytesHeld))
    return out
  }
  let n = 0
  const generate = (request: GenerateRequest): Promise<Outcome> => {
    const id = `r${n++}`
    const result = new Promise<Outcome>(resolve => done.set(id, resolve))
    engine.start(request, id)
    return result
  }
  return { engine, generate, rows, held }
}

const greedy = (content: string, maxTokens: number): GenerateRequest =>
  ({ messages: [{ role: 'user', content }], temperature: 0, topP: 1, topK: 0, stop: [], maxTokens })

for (const [name, dir] of [['chatd\'s own graph (append cache)', () => storiesModelDir()], ['onnx-community form (whole cache)', () => STORIES_OPTIMUM]] as const) {
  t.test(`${name}: a burst of long requests waits for cache room; the cache held never exceeds the budget`, async t => {
    const prompts = ['Once upon a time', 'The dog', 'Lily and Tom', 'A cat', 'The sun was hot', 'Tim had a toy', 'One day', 'Sue liked to sing']
    const maxTokens = 120
    const solo = await engineFor(dir(), { device: referenceDevice() })
    const expected: Outcome[] = []
    for (const p of prompts) expected.push(await solo.generate(greedy(p, maxTokens)))
    await solo.engine.close()

    // Room for three such sequences at a time: each reserves prompt + 120 + 64 slots.
    const perToken = kvBytesPerToken(solo.engine.model, solo.engine.session.cacheType)
    const budgetTokens = 3 * KvBudget.reserveOf(12, maxTokens)
    const tight = await engineFor(dir(), { kvCacheBytes: budgetTokens * perToken })
    const got = await Promise.all(prompts.map(p => tight.generate(greedy(p, maxTokens))))
    got.forEach((g, i) => t.same(g, expected[i], `"${prompts[i]}": same text, reason and count as with room to spare`))
    t.ok(Math.max(...tight.rows) <= 3, `at most 3 sequences shared a run (widest: ${Math.max(...tight.rows)})`)
    t.ok(Math.max(...tight.rows) >= 2, 'sequences still batched within the budget')
    const peak = Math.max(...tight.held)
    t.ok(peak <= budgetTokens * perToken, `cache held after every run: peak ${peak} bytes <= budget ${budgetTokens * perToken}`)
    await tight.engine.close()
    t.equal(tight.engine.cacheLayout.bytesHeld, 0, 'every cache freed at the end (the prefix cache\'s with the engine)')
  })
}

t.test('the prefix cache keeps two context windows of the model by default, at least 384 MiB', async t => {
  // DeepSeek-R1-Distill-Qwen-1.5B's float32 cache: a Codex conversation (7,892 tokens, 432 MiB) must fit, two of them.
  t.equal(defaultKeptBytes(16384, 57_344), 2 * 16384 * 57_344)
  t.ok(defaultKeptBytes(16384, 57_344) >= 2 * 7892 * 57_344, 'two Codex conversations of the 1.5B fit')
  t.equal(defaultKeptBytes(4096, 1280), 384 * 2 ** 20, 'a small model gets the floor')
})
