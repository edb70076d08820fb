// Continuous batching: sequences decoding together in one session.run per
// step compute exactly what each computes alone, whenever they join or leave.
import t, { type Test } from 'tap'
import type { FinishReason, GenerateRequest } from '../../../../src/engine/backend.ts'
import type { ForwardInput } from '../../../../src/engine/onnx/device/decoder-session.ts'
import { LocalEngine } from '../../../../src/engine/onnx/scheduler/engine.ts'
import { promptRoom, REPLY_ROOM } from '../../../../src/engine/onnx/scheduler/prefill-group.ts'
import type { CacheRoom } from '../../../../src/engine/onnx/cache/cache-layout.ts'
import { randomGpuFormModelDir, randomGqaModelDir, randomModelDir, STORIES_OPTIMUM, storiesModelDir, storiesPromptGraphModelDir } from '../../../helpers/models.ts'
import { referenceDevice, testDevice } from '../../../helpers/webgpu.ts'

interface Outcome { text: string; reason: FinishReason; completion: number }

interface EngineChoices {
  /** Rows a step may take; 8 by default. */
  maxBatch?: number
  /** Whether decode rows may share a run with a prompt chunk; yes by default. */
  mixedBatches?: boolean
  /** The tests' device by default; a reference answer's engine says `referenceDevice(dtype)`. */
  device?: 'cpu' | 'webgpu'
}

/** An in-thread engine whose runs are recorded, with a promise per request. */
async function engineFor (dir: string, dtype: 'fp32' | 'fp16' | 'q4', { maxBatch = 8, mixedBatches = true, device = testDevice() }: EngineChoices = {}) {
  const texts = new Map<string, string>()
  const done = new Map<string, (o: Outcome) => void>()
  const deltaCounts = new Map<string, number>()
  const cachedTokens = new Map<string, number>()
  const engine = await LocalEngine.load({ modelDir: dir, dtype, device, threads: 1, maxBatch, prefillChunk: 4, mixedBatches }, {
    delta: (id, text) => {
      texts.set(id, (texts.get(id) ?? '') + text.reasoning + text.content)
      deltaCounts.set(id, (deltaCounts.get(id) ?? 0) + 1)
    },
    finish: (id, reason, usage) => {
      cachedTokens.set(id, usage.prompt_tokens_details?.cached_tokens ?? 0)
      done.get(id)?.({ text: texts.get(id) ?? '', reason, completion: usage.completion_tokens })
    },
    error: (id, err) => { throw err },
  })
  const runs: number[] = []
  /** Runs whose rows took different numbers of tokens: decode rows beside a prompt chunk. */
  let mixedRuns = 0
  /**
   * Runs sent to the prompt graph, runs that fed more than one token per row to the main graph, and
   * the most rows of a run that fed several tokens a row on a past, and on an empty cache.
   */
  const graphRuns = { prompt: 0, mainWide: 0, widestPromptRunOnPast: 0, widestFirstRun: 0 }
  const forward = engine.session.forward.bind(engine.session)
  engine.session.forward = (input: ForwardInput) => {
    runs.push(input.batch)
    if (input.tokensPerRow && new Set(input.tokensPerRow).size > 1) mixedRuns++
    if (input.prompt) graphRuns.prompt++
    else if (input.inputIds[0].length > 1) graphRuns.mainWide++
    if (input.inputIds[0].length > 1 && input.past.length > 0) graphRuns.widestPromptRunOnPast = Math.max(graphRuns.widestPromptRunOnPast, input.batch)
    if (input.inputIds[0].length > 1 && input.past.length === 0) graphRuns.widestFirstRun = Math.max(graphRuns.widestFirstRun, input.batch)
    return forward(input)
  }
  let n = 0
  const generate = (request: GenerateRequest): { id: string; result: Promise<Outcome> } => {
    const id = `r${n++}`
    const result = new Promise<Outcome>(resolve => done.set(id, resolve))
    engine.start(request, id)
    return { id, result }
  }
  const deltasOf = (id: string) => deltaCounts.get(id) ?? 0
  return { engine, generate, runs, deltasOf, mixedRuns: () => mixedRuns, graphRuns, cachedOf: (id: string) => cachedTokens.get(id) ?? 0 }
}

const greedy = (content: string, maxTokens: number): GenerateRequest =>
  ({ messages: [{ role: 'user', content }], temperature: 0, topP: 1, topK: 0, stop: [], maxTokens })

const until = async (check: () => boolean) => {
  while (!check()) await new Promise(resolve => setTimeout(resolve, 1))
}

/**
 * Each prompt alone on one engine (the reference, on referenceDevice(): the CPU, but for int4 builds),
 * then all at once on another (the tests' device): every reply the same. Returns the second engine (still open, its runs recorded) and the
 * replies alone.
 */
async function burstEqualsSolo (t: Test, dir: string, dtype: 'fp32' | 'q4', prompts: Array<[string, number]>) {
  const solo = await engineFor(dir, dtype, { device: referenceDevice(dtype) })
  const expected: Outcome[] = []
  for (const [p, m] of prompts) expected.push(await solo.generate(greedy(p, m)).result)
  await solo.engine.close()
  const burst = await engineFor(dir, dtype)
  const got = await Promise.all(prompts.map(([p, m]) => burst.generate(greedy(p, m)).result))
  got.forEach((g, i) => t.same(g, expected[i], `prompt ${i}: same text, reason and count as alone`))
  return { burst, expected }
}

/** Prompts of different lengths, run alone (the reference, on referenceDevice()), then together with staggered starts. */
async function checkBatchedEqualsSolo (t: Test, dir: string, dtype: 'fp32' | 'fp16' | 'q4', expectBatches: boolean, mixedBatches = true) {
  const prompts: Array<[string, number]> = [
    ['Once upon a time', 40], ['The dog', 12], ['Lily and Tom went to the park to play with a big red ball', 30],
    // 'A' runs past 64 and 128 positions: the append cache grows while others share its steps.
    ['café 日本', 25], ['A', 140],
  ]
  const solo = await engineFor(dir, dtype, { device: referenceDevice(dtype) })
  const expected: Outcome[] = []
  for (const [p, m] of prompts) expected.push(await solo.generate(greedy(p, m)).result)
  await solo.engine.close()

  const together = await engineFor(dir, dtype, { mixedBatches })
  const pending: Array<Promise<Outcome>> = []
  // Two start at once; the others join while those are mid-decode, at different steps.
  const first = together.generate(greedy(...prompts[0]))
  pending.push(first.result, together.generate(greedy(...prompts[1])).result)
  await until(() => together.deltasOf(first.id) >= 3)
  pending.push(together.generate(greedy(...prompts[2])).result)
  await until(() => together.deltasOf(first.id) >= 8)
  pending.push(together.generate(greedy(...prompts[3])).result, together.generate(greedy(...prompts[4])).result)
  const got = await Promise.all(pending)
  got.forEach((g, i) => t.same(g, expected[i], `prompt ${i} (${JSON.stringify(prompts[i][0])}): same text, reason and count as alone`))
  const widest = Math.max(...together.runs)
  if (expectBatches) t.ok(widest >= 3, `decode steps ran up to ${widest} sequences in one run`)
  else t.equal(widest, 1, 'every run holds one sequence')
  // Graphs that pack rows feed the prompts that join mid-decode inside the others' steps.
  // With a prompt graph, prompt tokens and generated tokens run on different graphs: never in one run.
  const mixes = together.engine.cacheLayout.packsRows && mixedBatches && !together.engine.session.hasPromptGraph
  if (together.engine.session.hasPromptGraph) {
    t.ok(together.graphRuns.prompt >= 5, `${together.graphRuns.prompt} prompt runs went to the prompt graph`)
    t.equal(together.graphRuns.mainWide, 0, 'the main graph only ever took one generated token per row')
  }
  if (!together.engine.session.batchesPromptChunks) {
    t.equal(together.graphRuns.widestPromptRunOnPast, 1, 'every run that fed prompt tokens on a past held one sequence')
    t.equal(together.graphRuns.widestFirstRun, 2, 'the two prompts that arrived together went in one run, whole, the shorter left-padded')
  }
  if (mixes) t.ok(together.mixedRuns() >= 3, `${together.mixedRuns()} runs fed prompt chunks beside decoding rows`)
  else t.equal(together.mixedRuns(), 0, 'no run mixed prompt chunks with decoding rows')
  await together.engine.close()
}

for (const [name, dirOf, dtype] of [
  ['stories260k fp32', () => storiesModelDir('fp32'), 'fp32'],
  ['stories260k fp16 cache', () => storiesModelDir('fp16'), 'fp16'],
  ['random qwen2 int4', () => randomModelDir('qwen2', 'int4'), 'q4'],
  // What chatd pull writes for the default model: prompts on the int8 graph, generated tokens on int4.
  ['stories260k int4 with its int8 prompt graph', () => storiesPromptGraphModelDir(), 'q4'],
  // The onnx-community signature: the whole cache returned every run, rows left-padded.
  ['stories260k fp32, concat cache', () => storiesModelDir('fp32', 'concat'), 'fp32'],
  ['random qwen2 int4, concat cache', () => randomModelDir('qwen2', 'int4', 7, 'concat'), 'q4'],
  // Files chatd did not write (onnx-community / optimum form): every position's logits, no num_logits_to_keep.
  ['stories260k exported elsewhere, fp32', () => STORIES_OPTIMUM, 'fp32'],
  ['stories260k exported elsewhere, q4 without accuracy_level', () => STORIES_OPTIMUM, 'q4'],
] as const) {
  t.test(`${name}: batched greedy output equals unbatched`, async t => {
    await checkBatchedEqualsSolo(t, dirOf(), dtype, true)
  })
}

t.test('MIXED_BATCHES off: prompts that join mid-decode are fed in runs of their own, output equal to unbatched', async t => {
  await checkBatchedEqualsSolo(t, storiesModelDir('fp32'), 'fp32', true, false)
})

t.test('gqa-masked graph (the GPU form): decode steps batched, prompts that arrive together in one run, the others one per run, output equal to unbatched', async t => {
  await checkBatchedEqualsSolo(t, randomGpuFormModelDir('int4'), 'q4', true)
})

t.test('GroupQueryAttention graph: sequences take turns one per run, output equal to unbatched', async t => {
  await checkBatchedEqualsSolo(t, randomGqaModelDir('int4'), 'q4', false)
})

t.test('a request cancelled mid-batch leaves the others unchanged', async t => {
  const dir = storiesModelDir()
  const solo = await engineFor(dir, 'fp32')
  const a = await solo.generate(greedy('Once upon a time', 40)).result
  const c = await solo.generate(greedy('The dog', 40)).result
  await solo.engine.close()

  const batch = await engineFor(dir, 'fp32')
  const ra = batch.generate(greedy('Once upon a time', 40))
  const rb = batch.generate(greedy('Lily', 200))
  const rc = batch.generate(greedy('The dog', 40))
  await until(() => batch.deltasOf(rb.id) >= 5)
  batch.engine.cancel(rb.id)
  const b = await rb.result
  t.equal(b.reason, 'cancelled')
  t.ok(b.completion < 200, 'cancelled early')
  t.same(await ra.result, a, 'the first neighbour is unchanged')
  t.same(await rc.result, c, 'the second neighbour is unchanged')
  t.equal(batch.engine.activeCount, 0)
  await batch.engine.close()
})

t.test('at most maxBatch sequences decode at once; the rest wait their turn', async t => {
  const batch = await engineFor(storiesModelDir(), 'fp32', { maxBatch: 2 })
  const results = await Promise.all([0, 1, 2, 3].map(i => batch.generate(greedy(`Story ${i}`, 10)).result))
  t.ok(results.every(r => r.completion === 10), 'every request completes')
  t.equal(Math.max(...batch.runs), 2, 'never more than 2 rows')
  await batch.engine.close()
})

t.test('requests that arrive together are prefilled together, then decode together, each as it would alone', async t => {
  const { burst } = await burstEqualsSolo(t, storiesModelDir(), 'fp32', [['Once upon a time', 20], ['The dog', 20], ['Lily and Tom went to the park', 20]])
  t.equal(burst.runs[0], 3, 'the first run feeds all three prompts')
  // Prompts of different lengths: the shortest completes first and starts decoding, the
  // others finish their prompts in the following runs; no run ever holds more than three rows.
  t.ok(burst.runs.every(n => n <= 3))
  t.ok(burst.runs.filter(n => n === 3).length >= 15, 'most decode steps hold all three')
  await burst.engine.close()
})

t.test('gqa-masked graph: a burst of fresh prompts goes in one run, each whole and left-padded to the longest; prompts from a cached prefix, and those past 1,024 tokens together, go in runs of their own; prompts cached but for their last token go in together', async t => {
  const dir = randomGpuFormModelDir('int4')
  // Each long enough for the prefix cache to find it again (a block of 16 tokens or more).
  const prompts: Array<[string, number]> = [['Once upon a time', 12], ['The dog ran to the park', 12], ['Lily and Tom went to the park', 12]]
  const { burst, expected } = await burstEqualsSolo(t, dir, 'q4', prompts)
  // On a software renderer (CHATD_TEST_DEVICE=webgpu on lavapipe) prompts go 31 tokens a run
  // (DecoderSession.tokensPerRunLimit), so the runs are planned otherwise: the replies are still checked.
  const planned = burst.engine.session.tokensPerRunLimit === Infinity
  if (planned) {
    t.equal(burst.runs[0], 3, 'the first run feeds all three whole prompts')
    t.equal(burst.graphRuns.widestPromptRunOnPast, 0, 'no run fed prompt tokens on a past')
    t.ok(burst.runs.slice(1).every(n => n <= 3), 'then they decode together')
    t.ok(burst.runs.filter(n => n === 3).length >= 10, 'most decode steps hold all three')
  }

  // The same prompts again: cached but for their last token, which all three feed in one run on
  // their cached prefixes, one token a row (as a decode step: GroupQueryAttention takes that).
  const before = burst.runs.length
  const again = prompts.map(([p, m]) => burst.generate(greedy(p, m)))
  const againReplies = await Promise.all(again.map(r => r.result))
  againReplies.forEach((g, i) => t.same(g, expected[i], `prompt ${i} again: the same reply`))
  t.ok(again.every(r => burst.cachedOf(r.id) > 0), 'each from its cached prefix')
  if (planned) {
    t.equal(burst.runs[before], 3, 'their last prompt tokens in one run')
    t.equal(burst.graphRuns.widestPromptRunOnPast, 0, 'no run fed several tokens a row on a past')
  }
  // A prompt whose cached prefix is long is fed alone from it, and the burst it came in waits its turn.
  const story = 'Once upon a time there was a little girl named Lily. She loved to play in the park with her dog.'
  await burst.generate(greedy(story, 2)).result
  const follow = burst.generate(greedy(story + ' One day', 12))
  const other = burst.generate(greedy('The cat', 12))
  const [followed, alone] = await Promise.all([follow.result, other.result])
  t.ok(burst.cachedOf(follow.id) >= 64, `${burst.cachedOf(follow.id)} prompt tokens came from the cache`)
  if (planned) t.equal(burst.graphRuns.widestPromptRunOnPast, 1, 'the rest of its prompt went in a run of its own')
  const soloAgain = await engineFor(dir, 'q4')
  t.same(followed, await soloAgain.generate(greedy(story + ' One day', 12)).result, 'the same reply as alone and uncached')
  t.same(alone, await soloAgain.generate(greedy('The cat', 12)).result)
  await soloAgain.engine.close()
  await burst.engine.close()

  // Four fresh prompts of ~300 tokens: a run takes whole prompts up to 1,024 tokens, so three go
  // in the first run and the fourth in one of its own.
  const wide = await engineFor(dir, 'q4')
  const long = [0, 1, 2, 3].map(i => `${i} ${'Once upon a time '.repeat(18)}`)
  const firstRuns: number[] = []
  const forward = wide.engine.session.forward.bind(wide.engine.session)
  wide.engine.session.forward = (input: ForwardInput) => {
    if (input.past.length === 0 && input.inputIds[0].length > 1) firstRuns.push(input.batch)
    return forward(input)
  }
  const replies = await Promise.all(long.map(p => wide.generate(greedy(p, 2)).result))
  t.ok(replies.every(r => r.completion === 2), 'every prompt answered')
  if (planned) t.same(firstRuns, [3, 1], 'three whole prompts in the first run, the fourth in its own')
  await wide.engine.close()
})

t.test('a prompt that starts from a cached prefix and joins mid-decode is fed inside the others\' steps, as it would be alone', async t => {
  const dir = storiesModelDir()
  const story = 'Once upon a time there was a little girl named Lily. She loved to play outside in the park with her friends and her dog.'
  const followUp = story + ' One day she found a big red ball under a tree.'
  const solo = await engineFor(dir, 'fp32')
  const expected = await solo.generate(greedy(followUp, 20)).result
  await solo.engine.close()

  const together = await engineFor(dir, 'fp32')
  await together.generate(greedy(story, 4)).result // leaves the story's cache behind
  const other = together.generate(greedy('The dog', 80))
  await until(() => together.deltasOf(other.id) >= 3)
  const mixedBefore = together.mixedRuns()
  const next = together.generate(greedy(followUp, 20))
  t.same(await next.result, expected, 'same text, reason and count as alone and uncached')
  t.ok(together.cachedOf(next.id) >= 16, `${together.cachedOf(next.id)} prompt tokens came from the cache`)
  t.ok(together.mixedRuns() > mixedBefore, 'the rest of its prompt rode in the other\'s decode steps')
  await other.result
  await together.engine.close()
})

t.test('a prompt\'s runs ask its cache for room for the prompt and its reply (REPLY_ROOM at most), within the reservation', async t => {
  const story = 'Once upon a time there was a little girl named Lily. She loved to play outside in the park with her friends and her dog.'
  const e = await engineFor(storiesModelDir(), 'fp32')
  const prompt = e.engine.encodePrompt({ messages: [{ role: 'user', content: story }] }).length
  const rooms: Array<CacheRoom | undefined> = []
  const run = e.engine.cacheLayout.run.bind(e.engine.cacheLayout)
  e.engine.cacheLayout.run = (cache, tokens, keep, isPrompt, room) => {
    if (isPrompt) rooms.push(room)
    return run(cache, tokens, keep, isPrompt, room)
  }
  await e.generate(greedy(story, 8)).result
  t.ok(rooms.length > 0, `the prompt went in ${rooms.length} run(s)`)
  t.ok(rooms.every(r => r?.least === prompt + 8), 'a short reply: room for all of it')
  t.ok(rooms.every(r => r!.least! <= r!.most), 'within the reservation')
  // A prompt on a cached prefix: the prefix taken with that room.
  const takes: Array<number | undefined> = []
  const gather = e.engine.cacheLayout.gather.bind(e.engine.cacheLayout)
  e.engine.cacheLayout.gather = (rows, least) => {
    if (rows.length === 1 && rows[0].length !== undefined && takes.length === 0) takes.push(least)
    return gather(rows, least)
  }
  const next = e.generate(greedy(story + ' One day she found a ball.', 20))
  await next.result
  t.ok(e.cachedOf(next.id) >= 16, 'the next prompt took a cached prefix')
  t.same(takes, [e.engine.encodePrompt({ messages: [{ role: 'user', content: story + ' One day she found a ball.' }] }).length + 20], 'with room for the prompt and its reply')
  // A long reply (past this model's context): REPLY_ROOM of it.
  t.equal(promptRoom({ promptIds: new Array<number>(8000).fill(1), maxNewTokens: 30_000 }), 8000 + REPLY_ROOM)
  t.equal(promptRoom({ promptIds: new Array<number>(8000).fill(1), maxNewTokens: 300 }), 8300)
  await e.engine.close()
})

t.test('a request alone copies its cache only for the prefix cache, once: its prompt\'s cache goes to its decode batch as it is, and so does a reused prefix to its prompt', async t => {
  const story = 'Once upon a time there was a little girl named Lily. She loved to play outside in the park with her friends and her dog.'
  const e = await engineFor(storiesModelDir(), 'fp32')
  const gathers: number[] = []
  const gather = e.engine.cacheLayout.gather.bind(e.engine.cacheLayout)
  e.engine.cacheLayout.gather = rows => {
    gathers.push(rows.length)
    return gather(rows)
  }
  const first = await e.generate(greedy(story, 8)).result
  t.equal(first.completion, 8)
  // Each copy is the whole cache (hundreds of megabytes for a long prompt on the 1.5B): only the
  // prefix cache's own copy is left, the prompt and reply at its end (nothing asked for the prompt
  // alone while it decoded).
  t.same(gathers, [1], 'one copy, the prefix cache\'s')
  gathers.length = 0
  const next = e.generate(greedy(story + ' One day she found a ball.', 8))
  t.equal((await next.result).completion, 8)
  t.ok(e.cachedOf(next.id) >= 16, `${e.cachedOf(next.id)} prompt tokens came from the cache`)
  // Taking the prefix out of the cache copies it once (the entry stays); the prompt runs on that copy.
  t.same(gathers, [1, 1], 'the prefix taken, then the prefix cache\'s one')
  await e.engine.close()
})
