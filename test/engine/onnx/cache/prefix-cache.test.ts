// The prefix cache: a request that starts like an earlier one (the next turn
// of a chat, a shared system prompt) reuses that request's cache and computes
// only the rest, with output identical to computing everything.
import t, { type Test } from 'tap'
import type { ChatMessage } from '../../../../src/engine/backend.ts'
import { LocalEngine, type EngineSettings } from '../../../../src/engine/onnx/scheduler/engine.ts'
import { KvBudget, kvBytesPerToken } from '../../../../src/engine/onnx/cache/kv-budget.ts'
import { stripEarlierThinking } from '../../../../src/prompt/shape.ts'
import { STORIES_OPTIMUM, storiesModelDir, storiesPromptGraphModelDir } from '../../../helpers/models.ts'
import { inThreadEngine, USER_TURNS, withChatTemplate, type Outcome } from '../../../helpers/engine-harness.ts'
import { startStoriesServer } from '../../../helpers/stories-server.ts'
import { referenceDevice, testDevice } from '../../../helpers/webgpu.ts'

/** An in-thread engine counting the prompt positions it computes. */
const engineFor = (dir: string, settings: Partial<EngineSettings> = {}) => inThreadEngine(t, dir, { prefillChunk: 8, ...settings })

/** A four-turn chat as a client sends it: each turn the whole conversation again, earlier replies included. */
async function conversation (generate: (m: ChatMessage[], max: number) => Promise<Outcome>): Promise<Outcome[]> {
  const messages: ChatMessage[] = []
  const outcomes: Outcome[] = []
  for (const turn of USER_TURNS) {
    messages.push({ role: 'user', content: turn })
    // What chatd's prompt shaping does to a conversation before the engine sees it.
    const outcome = await generate(stripEarlierThinking(messages), 24)
    outcomes.push(outcome)
    messages.push({ role: 'assistant', content: outcome.text })
  }
  return outcomes
}

for (const [layout, source, dtype] of [
  ['append cache', () => storiesModelDir(), 'fp32'],
  ['whole-cache graph (onnx-community form)', () => STORIES_OPTIMUM, 'fp32'],
  // Prompts on the int8 prompt graph, answers on int4: the cache keeps prompts only.
  ['int4 with an int8 prompt graph', () => storiesPromptGraphModelDir(), 'q4'],
] as const) {
  t.test(`${layout}: a multi-turn chat with R1's template reuses each earlier turn, output unchanged`, async t => {
    const dir = withChatTemplate(t.testdir({}), source())
    const off = await engineFor(dir, { prefixCache: false, dtype, device: referenceDevice(dtype) })
    const expected = await conversation(off.generate)
    const on = await engineFor(dir, { dtype })
    const got = await conversation(on.generate)
    got.forEach((g, i) => t.same({ ...g, cached: 0 }, { ...expected[i], cached: 0 }, `turn ${i + 1}: same reply, reason and count`))
    t.equal(got[0].cached, 0, 'turn 1: nothing to reuse')
    for (let i = 1; i < got.length; i++) t.ok(got[i].cached >= 16, `turn ${i + 1} reused ${got[i].cached} prompt tokens`)
    t.ok(on.runs.positions < off.runs.positions, `positions computed: ${on.runs.positions} with the cache, ${off.runs.positions} without`)
    t.equal(off.engine.prefixes, null, 'PREFIX_CACHE off: no cache at all')
  })
}

t.test('int4 with an int8 prompt graph: a request\'s prompt is copied into the cache once, not again when it finishes', async t => {
  const on = await engineFor(withChatTemplate(t.testdir({}), storiesPromptGraphModelDir()), { dtype: 'q4' })
  const layout = on.engine.cacheLayout
  const gather = layout.gather.bind(layout)
  const copied: number[] = []
  layout.gather = rows => { copied.push(rows[0].length ?? -1); return gather(rows) }
  const story: ChatMessage[] = [{ role: 'user', content: USER_TURNS[0] }]
  const first = await on.generate(story, 20)
  await on.engine.idle()
  t.equal(copied.length, 1, `one copy (of ${copied.join(', ')} positions): the cache keeps the prompt only, copied once, as the reply ends`)
  layout.gather = gather
  t.same({ ...await on.generate(story, 20), cached: 0 }, first, 'the same prompt again: the same reply')
})

async function shared (t: Test, dir: string): Promise<void> {
  const system = { role: 'system' as const, content: 'You tell short stories for children about animals, friends, the park, the sea and the sun.' }
  const asks = ['A story about a cat.', 'A story about a bird.', 'A story about a fish.']
  const off = await engineFor(dir, { prefixCache: false, device: referenceDevice() })
  const expected: Outcome[] = []
  for (const ask of asks) expected.push(await off.generate([system, { role: 'user', content: ask }], 20))
  const on = await engineFor(dir)
  const first = await on.generate([system, { role: 'user', content: asks[0] }], 20)
  t.same(first, { ...expected[0], cached: 0 })
  // The next two together: both reuse the first's system prompt and batch with each other.
  const rest = await Promise.all(asks.slice(1).map(ask => on.generate([system, { role: 'user', content: ask }], 20)))
  rest.forEach((r, i) => {
    t.same({ ...r, cached: 0 }, { ...expected[i + 1], cached: 0 }, `"${asks[i + 1]}": the same reply`)
    t.ok(r.cached >= 16, `"${asks[i + 1]}" reused ${r.cached} tokens of the shared system prompt`)
  })
}

t.test('two requests sharing a long system prompt: the later ones reuse it, batched together, output unchanged', async t => {
  await shared(t, storiesModelDir())
})

t.test('a running request\'s prompt is reused by one that arrives while it decodes; copied only then', async t => {
  const dir = storiesModelDir()
  const messages: ChatMessage[] = [{ role: 'user', content: 'Lily and Tom went to the park to play with a big red ball and a small blue kite' }]
  const off = await engineFor(dir, { prefixCache: false, device: referenceDevice() })
  const expected = await off.generate(messages, 60)
  t.ok(expected.completion > 1, `the first request decodes ${expected.completion} tokens`)
  const on = await engineFor(dir)
  const promptLength = on.engine.encodePrompt({ messages }).length
  // The second arrives before the first's first decode step: its prompt is in, its reply not yet.
  let second: Promise<Outcome> | null = null
  let arrival = { cached: -1, active: 0 }
  const beforeDecode = (): void => {
    if (on.runs.positions <= promptLength) {
      on.runs.beforeRun = beforeDecode
      return
    }
    arrival = { cached: on.engine.prefixes!.size, active: on.engine.activeCount }
    second = on.generate(messages, 60)
  }
  on.runs.beforeRun = beforeDecode
  const first = await on.generate(messages, 60)
  t.ok(second, 'the second request arrived during one of the first\'s runs')
  t.same(arrival, { cached: 0, active: 1 }, 'it arrived with the first still running, its prompt not copied yet (nothing had asked for it)')
  const got = await second!
  t.ok(got.cached >= 16, `reused ${got.cached} tokens while the first was still running`)
  t.same({ ...got, cached: 0 }, { ...expected, cached: 0 })
  t.same({ ...first, cached: 0 }, { ...expected, cached: 0 })
})

t.test('a request cancelled while it decodes leaves its prompt for later ones', async t => {
  const dir = storiesModelDir()
  const messages: ChatMessage[] = [{ role: 'user', content: 'Lily and Tom went to the park to play with a big red ball and a small blue kite' }]
  const expected = await (await engineFor(dir, { prefixCache: false, device: referenceDevice() })).generate(messages, 20)
  const on = await engineFor(dir)
  const promptLength = on.engine.encodePrompt({ messages }).length
  const cancelInDecode = (): void => {
    if (on.runs.positions <= promptLength + 2) {
      on.runs.beforeRun = cancelInDecode
      return
    }
    on.engine.cancel('r0')
  }
  on.runs.beforeRun = cancelInDecode
  const cancelled = await on.generate(messages, 60)
  t.equal(cancelled.reason, 'cancelled')
  t.equal(on.engine.prefixes!.size, 1, 'its prompt kept')
  const got = await on.generate(messages, 20)
  t.equal(got.cached, promptLength - 1, 'the same prompt again reuses all of it but its last token')
  t.same({ ...got, cached: 0 }, { ...expected, cached: 0 }, 'the same reply as without a cache')
})

t.test('a prompt\'s cache is copied for later requests once, never before its first token: after the reply ends, or when a request of its scope looks for it', async t => {
  const timeline: string[] = []
  const waiting = new Map<string, () => void>()
  /** Notes an event once; `event` resolves when it has happened. */
  const note = (what: string): void => {
    if (timeline.includes(what)) return
    timeline.push(what)
    waiting.get(what)?.()
  }
  const event = (what: string): Promise<void> => timeline.includes(what) ? Promise.resolve() : new Promise(resolve => waiting.set(what, resolve))
  const engine = await LocalEngine.load({ modelDir: storiesModelDir(), dtype: 'fp32', device: testDevice(), threads: 1, prefillChunk: 8 }, {
    delta: id => note(`first token of ${id}`),
    finish: id => note(`finish of ${id}`),
    error: (_id, err) => { throw err },
  })
  t.teardown(() => engine.close())
  const prefixes = engine.prefixes!
  const remember = prefixes.remember.bind(prefixes)
  prefixes.remember = (scope, tokens, ...rest) => {
    timeline.push(`copy of ${tokens.length}`)
    remember(scope, tokens, ...rest)
  }
  const ask = (id: string, content: string, maxTokens: number, cacheScope: string): void => {
    engine.start({ messages: [{ role: 'user', content }], temperature: 0, topP: 1, topK: 0, stop: [], maxTokens, cacheScope }, id)
  }
  const promptOf = (content: string): number => engine.encodePrompt({ messages: [{ role: 'user', content }] }).length

  // Alone: its prompt fed in runs of its own, its prompt and reply kept when it ends.
  ask('alone', USER_TURNS[0], 4, 'A')
  await event('finish of alone')
  t.same(timeline, ['first token of alone', 'finish of alone', `copy of ${promptOf(USER_TURNS[0]) + 3}`], 'alone: the first token and the finish, then one copy')

  // Arriving while another request decodes: it rides in that request's decode steps (a mixed
  // batch); another scope's arrival copies nothing of the first.
  timeline.length = 0
  ask('decoding', USER_TURNS[1], 60, 'A')
  await event('first token of decoding')
  ask('riding', USER_TURNS[2], 4, 'B')
  await event('finish of riding')
  t.same(timeline, ['first token of decoding', 'first token of riding', 'finish of riding', `copy of ${promptOf(USER_TURNS[2]) + 3}`], 'riding: the first token and the finish, then one copy; the other scope\'s prompt not copied')
  // A request of the decoding one's scope looks for a prefix: the decoding prompt is copied then, once.
  ask('same scope', USER_TURNS[1], 4, 'A')
  await event('finish of same scope')
  await event('finish of decoding')
  const copies = timeline.filter(e => e.startsWith('copy')).length
  t.equal(timeline[4], `copy of ${promptOf(USER_TURNS[1])}`, `the decoding request's prompt, when the same scope's request arrived (${timeline.join('; ')})`)
  t.ok(timeline.indexOf('first token of same scope') > 4, 'before that request\'s first token: it reuses the copy')
  t.equal(copies, 4, 'then one copy as each ends')
})

t.test('a cached prefix longer than the new prompt: only what the prompt has, never its last token', async t => {
  const dir = storiesModelDir()
  const long = 'Once upon a time there was a little dog named Max who lived in a small house near the woods with his mother.'
  const short = 'Once upon a time there was a little dog named Max who lived in a small house'
  const off = await engineFor(dir, { prefixCache: false, device: referenceDevice() })
  const expected = await off.generate([{ role: 'user', content: short }], 20)
  const on = await engineFor(dir)
  await on.generate([{ role: 'user', content: long }], 20)
  const got = await on.generate([{ role: 'user', content: short }], 20)
  const promptTokens = on.engine.encodePrompt({ messages: [{ role: 'user', content: short }] }).length
  t.ok(got.cached >= 16 && got.cached < promptTokens, `reused ${got.cached} of ${promptTokens} prompt tokens`)
  t.same({ ...got, cached: 0 }, { ...expected, cached: 0 })
  // The same prompt again: all but its last token come from the cache.
  const again = await on.generate([{ role: 'user', content: short }], 20)
  t.equal(again.cached, promptTokens - 1)
  t.same({ ...again, cached: 0 }, { ...expected, cached: 0 })
})

t.test('an entry evicted while another request wants it: that request computes its prompt again, output unchanged', async t => {
  const dir = storiesModelDir()
  const story = 'Once upon a time there was a little dog named Max who lived in a small house near the woods.'
  const off = await engineFor(dir, { prefixCache: false, device: referenceDevice() })
  const expected = await off.generate([{ role: 'user', content: story }], 20)
  // Room for one 400-token request, or for the cached story and a short request, not for all three.
  const perToken = kvBytesPerToken(off.engine.model, off.engine.session.cacheType)
  const storyTokens = off.engine.encodePrompt({ messages: [{ role: 'user', content: story }] }).length
  const bigReserve = KvBudget.reserveOf(5, 400)
  const on = await engineFor(dir, { kvCacheBytes: (bigReserve + 20) * perToken })
  await on.generate([{ role: 'user', content: story }], 20)
  t.equal(on.engine.prefixes?.size, 1, 'the story is cached')
  // A big request first (it needs the cache's room), then the story again, queued behind it.
  const big = on.generate([{ role: 'user', content: 'Hi' }], 400)
  const again = on.generate([{ role: 'user', content: story }], 20)
  const [, got] = await Promise.all([big, again])
  t.equal(got.cached, 0, 'the entry was evicted to admit the big request first')
  t.same({ ...got, cached: 0 }, { ...expected, cached: 0 }, 'computed again, same reply')
  t.ok(storyTokens > 16)
})

t.test('through the API: usage.prompt_tokens_details.cached_tokens and /metrics count what was reused; PREFIX_CACHE=0 turns it off', async t => {
  const key = `sk-chatd-${'prefixCache'.repeat(2)}abcdefghij`
  const prompt = 'Once upon a time there was a little dog named Max who lived in a small house near the woods.'
  for (const [setting, reuses] of [['1', true], ['0', false]] as const) {
    const { url } = await startStoriesServer(t, { modelId: 'stories', key, threads: 1, env: { PREFIX_CACHE: setting } })
    const ask = async (): Promise<{ content: string; usage: { prompt_tokens: number; prompt_tokens_details?: { cached_tokens: number } } }> => {
      const res = await fetch(`${url}/api/v1/chat/completions`, {
        method: 'POST',
        headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
        body: JSON.stringify({ model: 'stories', messages: [{ role: 'user', content: prompt }], temperature: 0, max_tokens: 16 }),
      })
      const body = await res.json() as { choices: Array<{ message: { content: string } }>; usage: { prompt_tokens: number; prompt_tokens_details?: { cached_tokens: number } } }
      return { content: body.choices[0].message.content, usage: body.usage }
    }
    const first = await ask()
    const second = await ask()
    t.equal(first.usage.prompt_tokens_details?.cached_tokens, 0, `PREFIX_CACHE=${setting}: nothing cached at first`)
    t.equal(second.content, first.content, 'the same reply')
    t.equal(second.usage.prompt_tokens_details?.cached_tokens, reuses ? second.usage.prompt_tokens - 1 : 0, `PREFIX_CACHE=${setting}: the second request's cached tokens`)
    const metrics = await (await fetch(`${url}/metrics`)).text()
    t.match(metrics, new RegExp(`chatd_prompt_tokens_cached_total\\{model="stories"\\} ${reuses ? second.usage.prompt_tokens - 1 : 0}\\n`))
  }
})
