// The prefix cache is private to its cache scope (the server sets one per
// account and cache_salt): a request reuses only what its own scope computed,
// next turns computed ahead included, so cached_tokens and the time to the
// first token tell one account nothing of another's prompts. The operator's
// shared prefix is the one exception, up to its end; and one scope's flood of
// requests does not evict the other scopes' entries beyond their fair share.
import t from 'tap'
import type { ChatMessage } from '../../../../src/engine/backend.ts'
import type { EngineSettings } from '../../../../src/engine/onnx/scheduler/engine.ts'
import { KvBudget, kvBytesPerToken, SLOT_SLACK } from '../../../../src/engine/onnx/cache/kv-budget.ts'
import { nextTurnIds } from '../../../../src/engine/onnx/cache/next-turn.ts'
import { nextTurnStart } from '../../../../src/prompt/shape.ts'
import { STORIES_OPTIMUM, storiesModelDir } from '../../../helpers/models.ts'
import { inThreadEngine, withChatTemplate } from '../../../helpers/engine-harness.ts'
import { referenceDevice } from '../../../helpers/webgpu.ts'

const engineFor = (dir: string, settings: Partial<EngineSettings> = {}) => inThreadEngine(t, dir, { prefillChunk: 8, ...settings })

/** Account A's secret, in a prompt well past the cache's 16-token minimum. */
const secret = (pin: string): ChatMessage[] => [{ role: 'user', content: `Once upon a time there was a little dog named Max. His secret number was ${pin} and he told nobody.` }]
/** B's probes: A's exact prompt, A's prompt cut before the PIN, a wrong guess, and the right one again. */
const PROBES = [
  secret('4821'),
  [{ role: 'user', content: 'Once upon a time there was a little dog named Max. His secret number was' }],
  secret('1234'),
  secret('4821'),
] satisfies ChatMessage[][]

const FORMS = [
  ['chatd\'s own graphs', () => storiesModelDir()],
  ['the onnx-community (optimum) form', () => STORIES_OPTIMUM],
] as const

for (const [form, source] of FORMS) {
  t.test(`${form}: account B reuses nothing of account A's prompt, and its replies are those of a cold engine; A reuses its own`, async t => {
    const dir = source()
    const cold = await engineFor(dir, { prefixCache: false, device: referenceDevice() })
    const expected = []
    for (const probe of PROBES) expected.push(await cold.generate(probe, 12))
    // What B sees on a server where A never was: the cold replies, and cached_tokens from B's own probes only.
    const withoutA = await engineFor(dir)
    const alone = []
    for (const probe of PROBES) alone.push(await withoutA.generate(probe, 12, 'B'))
    const on = await engineFor(dir)
    const a = await on.generate(secret('4821'), 12, 'A')
    t.equal(a.cached, 0)
    for (const [i, probe] of PROBES.entries()) {
      const b = await on.generate(probe, 12, 'B')
      t.same(b, alone[i], `B's probe ${i + 1}: exactly what B sees where A never was (cached_tokens ${b.cached})`)
      t.same({ ...b, cached: 0 }, { ...expected[i], cached: 0 }, `B's probe ${i + 1}: the cold engine's reply`)
    }
    t.equal(alone[0].cached, 0, 'B sending A\'s exact prompt first: cached_tokens 0')
    const promptTokens = on.engine.encodePrompt({ messages: secret('4821') }).length
    t.equal(alone[3].cached, promptTokens - 1, 'B reuses what B itself computed')
    const again = await on.generate(secret('4821'), 12, 'A')
    t.equal(again.cached, promptTokens - 1, 'A\'s repeat reuses its own prompt')
    t.same({ ...again, cached: 0 }, { ...a, cached: 0 })
  })
}

t.test('cache_salt\'s scopes: another salt of the same account reuses nothing; the same salt reuses', async t => {
  const on = await engineFor(storiesModelDir())
  // The server's scopes for one account with no salt, salt s1 and salt s2 are three different strings.
  const first = await on.generate(secret('4821'), 8, 'A')
  const s1 = await on.generate(secret('4821'), 8, 'A+s1')
  t.equal(s1.cached, 0, 'salt s1: nothing of the unsalted request')
  t.same({ ...s1, cached: 0 }, { ...first, cached: 0 })
  const s2 = await on.generate(secret('4821'), 8, 'A+s2')
  t.equal(s2.cached, 0, 'salt s2: nothing of salt s1\'s')
  const s1Again = await on.generate(secret('4821'), 8, 'A+s1')
  t.ok(s1Again.cached >= 16, `salt s1 again: reused ${s1Again.cached} tokens`)
})

for (const [form, source] of FORMS) {
  t.test(`${form}: a next turn computed ahead for account A is reused by A alone`, async t => {
    const dir = withChatTemplate(t.testdir({}), source())
    const story = secret('4821')
    const cold = await engineFor(dir, { prefixCache: false, device: referenceDevice() })
    const reply = await cold.generate(story, 24)
    const followUp: ChatMessage[] = [...story, { role: 'assistant', content: reply.text }, { role: 'user', content: 'What did Max do next?' }]
    const expected = await cold.generate(followUp, 12)

    const on = await engineFor(dir)
    t.same(await on.generate(story, 24, 'A'), reply)
    const next = nextTurnStart(story, reply.text)
    const ahead = nextTurnIds(next, turn => on.engine.encodePrompt({ messages: turn })).length
    on.engine.prepareNextTurn(next, 'A')
    await on.engine.idle()
    t.ok(on.engine.tokensComputedAhead > 0, 'A\'s next turn was computed ahead')
    const b = await on.generate(followUp, 12, 'B')
    t.equal(b.cached, 0, 'B sending A\'s next turn: cached_tokens 0')
    t.same(b, expected, 'B: the cold engine\'s reply')
    const a = await on.generate(followUp, 12, 'A')
    t.equal(a.cached, ahead, `A's next turn reused all ${ahead} tokens computed ahead`)
    t.same({ ...a, cached: 0 }, { ...expected, cached: 0 })
  })
}

const SYSTEM = 'You tell short stories for children about animals, friends, the park, the sea and the sun.'

for (const [form, source, placement] of [...FORMS.map(([f, s]) => [f, s, 'system'] as const), [FORMS[0][0], FORMS[0][1], 'user'] as const]) {
  t.test(`${form}: the operator's shared prefix (${placement} placement): another account reuses exactly up to its end, nothing beyond`, async t => {
    const dir = source()
    const ask = (question: string): ChatMessage[] => placement === 'system'
      ? [{ role: 'system', content: SYSTEM }, { role: 'user', content: question }]
      : [{ role: 'user', content: `${SYSTEM}\n\n${question}` }]
    const question = 'A story about Max and his secret number 4821.'
    const cold = await engineFor(dir, { prefixCache: false, device: referenceDevice() })
    const expected = await cold.generate(ask(question), 12)
    const on = await engineFor(dir, { sharedPrefix: { text: SYSTEM, placement } })
    const shared = on.engine.prefixes?.sharedIds.length ?? 0
    const promptTokens = on.engine.encodePrompt({ messages: ask(question) }).length
    t.ok(shared >= 16 && shared < promptTokens - 8, `the shared prefix is ${shared} of the prompt's ${promptTokens} tokens`)
    t.equal((await on.generate(ask(question), 12, 'A')).cached, 0)
    const b = await on.generate(ask(question), 12, 'B')
    t.equal(b.cached, shared, 'B reused the shared prefix and nothing of A\'s question')
    t.same({ ...b, cached: 0 }, { ...expected, cached: 0 }, 'B: the cold engine\'s reply')
    t.equal((await on.generate(ask(question), 12, 'A')).cached, promptTokens - 1, 'A still reuses its own whole prompt')
    // A prompt that differs inside the shared text reuses nothing of it.
    const other = await on.generate(placement === 'system'
      ? [{ role: 'system', content: SYSTEM.replace('sun', 'moon') }, { role: 'user', content: question }]
      : [{ role: 'user', content: `${SYSTEM.replace('sun', 'moon')}\n\n${question}` }], 12, 'C')
    t.ok(other.cached < shared, `another system prompt reuses less than the shared prefix (${other.cached})`)
  })
}

t.test('without the setting, a system prompt two accounts both send is not shared', async t => {
  const on = await engineFor(storiesModelDir())
  const messages: ChatMessage[] = [{ role: 'system', content: SYSTEM }, { role: 'user', content: 'A story about a cat.' }]
  await on.generate(messages, 8, 'A')
  t.equal((await on.generate(messages, 8, 'B')).cached, 0)
})

t.test('fair share: account A\'s flood of requests does not evict account B\'s cached prompt', async t => {
  const dir = storiesModelDir()
  const probe = await engineFor(dir, { prefixCache: false })
  const perToken = kvBytesPerToken(probe.engine.model, probe.engine.session.cacheType)
  const bPrompt = secret('4821')
  const floods: ChatMessage[][] = [
    'Lily and Tom went to the park to play with a big red ball.',
    'The sun was hot and the sea was blue, so Sam went for a swim.',
    'A small bird sat on a tree and sang a happy song all day.',
    'Mom made a big cake for the party and everyone was happy.',
    'The cat saw a fish in the pond and wanted to catch it.',
    'Ben had a new toy car that was red and very fast.',
  ].map(content => [{ role: 'user', content }])
  const bTokens = probe.engine.encodePrompt({ messages: bPrompt }).length
  const longest = Math.max(...floods.map(m => probe.engine.encodePrompt({ messages: m }).length))
  const floodReserve = KvBudget.reserveOf(longest, 40)
  // Two of A's requests at a time beside B's entry; never three.
  const bEntry = bTokens + 8 + SLOT_SLACK
  const on = await engineFor(dir, { kvCacheBytes: (2 * floodReserve + bEntry + 8) * perToken })
  await on.generate(bPrompt, 8, 'B')
  t.equal(on.engine.prefixes?.size, 1, 'B\'s prompt is cached')
  const replies = await Promise.all(floods.map(m => on.generate(m, 40, 'A')))
  t.ok(replies.every(r => r.completion > 0), 'every request of A\'s flood was answered')
  const again = await on.generate(bPrompt, 8, 'B')
  t.equal(again.cached, bTokens - 1, 'B\'s entry outlived the flood: B reuses its prompt')
  t.equal(on.engine.prefixes?.sizeOf('B'), 1)
})
