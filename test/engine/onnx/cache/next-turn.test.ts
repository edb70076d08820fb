// Computing a conversation's next turn ahead: once a reply is out, the engine
// feeds the conversation as the next request will start (earlier messages, then
// the reply as an assistant turn) while it is idle, so the next turn computes
// only its new message. Replies must be exactly those computed without it.
import t from 'tap'
import type { ChatMessage } from '../../../../src/engine/backend.ts'
import type { EngineSettings } from '../../../../src/engine/onnx/scheduler/engine.ts'
import { AHEAD_CHUNK, MAX_PENDING, NextTurns, nextTurnIds } from '../../../../src/engine/onnx/cache/next-turn.ts'
import { KvBudget, kvBytesPerToken, SLOT_SLACK } from '../../../../src/engine/onnx/cache/kv-budget.ts'
import { nextTurnStart, stripEarlierThinking } from '../../../../src/prompt/shape.ts'
import { STORIES_OPTIMUM, storiesModelDir, storiesPromptGraphModelDir } from '../../../helpers/models.ts'
import { inThreadEngine, USER_TURNS, withChatTemplate, type Outcome } from '../../../helpers/engine-harness.ts'
import { startStoriesServer } from '../../../helpers/stories-server.ts'
import { referenceDevice } from '../../../helpers/webgpu.ts'

/**
 * Qwen3's way with earlier turns, in small: an assistant turn after the last user message keeps an
 * empty thinking block, earlier ones do not, so a conversation ending in a reply renders that reply
 * otherwise than the next turn will.
 */
const QWEN3_LIKE_TEMPLATE = "{%- set ns = namespace(last_user=-1) -%}{%- for m in messages -%}{%- if m.role == 'user' -%}{%- set ns.last_user = loop.index0 -%}{%- endif -%}{%- endfor -%}" +
  "{%- for m in messages -%}{%- if m.role == 'assistant' and loop.index0 > ns.last_user -%}{{ '<|im_start|>assistant\\n<think>\\n\\n</think>\\n\\n' + m.content + '<|im_end|>\\n' }}" +
  "{%- else -%}{{ '<|im_start|>' + m.role + '\\n' + m.content + '<|im_end|>\\n' }}{%- endif -%}{%- endfor -%}{%- if add_generation_prompt -%}{{ '<|im_start|>assistant\\n' }}{%- endif -%}"

/** An in-thread engine counting the positions its runs compute, and a hook called before each run. */
const engineFor = (dir: string, settings: Partial<EngineSettings> = {}) => inThreadEngine(t, dir, settings)

/**
 * A four-turn chat as a client sends it. With `ahead`, each reply's conversation is handed to the
 * engine as the server does after every reply, and the engine finishes it before the next turn
 * (a user reading and typing). Returns the replies and the positions the requests themselves computed.
 */
async function conversation (e: Awaited<ReturnType<typeof engineFor>>, ahead: boolean): Promise<{ outcomes: Outcome[]; requestPositions: number; aheadLengths: number[] }> {
  const messages: ChatMessage[] = []
  const outcomes: Outcome[] = []
  const aheadLengths: number[] = []
  let requestPositions = 0
  for (const turn of USER_TURNS) {
    messages.push({ role: 'user', content: turn })
    const shaped = stripEarlierThinking(messages)
    const before = e.runs.positions
    const outcome = await e.generate(shaped, 24)
    requestPositions += e.runs.positions - before
    outcomes.push(outcome)
    messages.push({ role: 'assistant', content: outcome.text })
    const next = nextTurnStart(shaped, outcome.text)
    aheadLengths.push(nextTurnIds(next, turn => e.engine.encodePrompt({ messages: turn })).length)
    if (ahead) e.engine.prepareNextTurn(next)
    await e.engine.idle()
  }
  return { outcomes, requestPositions, aheadLengths }
}

t.test('a template that renders the last reply otherwise than an earlier one (Qwen3-like): the next turn still computes only its new message', async t => {
  const dir = withChatTemplate(t.testdir({}), storiesPromptGraphModelDir(), QWEN3_LIKE_TEMPLATE)
  const expected = await conversation(await engineFor(dir, { prefixCache: false, dtype: 'q4', device: referenceDevice('q4') }), false)
  const on = await engineFor(dir, { dtype: 'q4' })
  const got = await conversation(on, true)
  got.outcomes.forEach((g, i) => t.same({ ...g, cached: 0 }, { ...expected.outcomes[i], cached: 0 }, `turn ${i + 1}: the same reply and reason`))
  const rendered = on.engine.template.render([{ role: 'user', content: 'Hi' }, { role: 'assistant', content: 'Hello' }], { addGenerationPrompt: false }).text
  t.match(rendered, '<think>', 'the template renders a last reply with a thinking block')
  for (let i = 1; i < USER_TURNS.length; i++) {
    t.equal(got.outcomes[i].cached, got.aheadLengths[i - 1], `turn ${i + 1}: everything before its new message came from the cache (${got.outcomes[i].cached} tokens)`)
  }
})

for (const [layout, source, dtype] of [
  ['append cache', () => storiesModelDir(), 'fp32'],
  ['whole-cache graph (onnx-community form)', () => STORIES_OPTIMUM, 'fp32'],
  // Answers were generated on int4; computed ahead they run on the prompt graph, as a prompt holding them does.
  ['int4 with an int8 prompt graph', () => storiesPromptGraphModelDir(), 'q4'],
] as const) {
  t.test(`${layout}: each turn after the first computes only its new message, replies unchanged`, async t => {
    const dir = withChatTemplate(t.testdir({}), source())
    const expected = await conversation(await engineFor(dir, { prefixCache: false, dtype, device: referenceDevice(dtype) }), false)
    const plain = await conversation(await engineFor(dir, { dtype }), false)
    const on = await engineFor(dir, { dtype })
    const got = await conversation(on, true)
    got.outcomes.forEach((g, i) => t.same({ ...g, cached: 0 }, { ...expected.outcomes[i], cached: 0 }, `turn ${i + 1}: the same reply and reason`))
    for (let i = 1; i < USER_TURNS.length; i++) {
      t.equal(got.outcomes[i].cached, got.aheadLengths[i - 1], `turn ${i + 1}: the whole conversation before its new message came from the cache (${got.outcomes[i].cached} tokens)`)
      t.ok(got.outcomes[i].cached > plain.outcomes[i].cached, `turn ${i + 1}: more than the previous prompt alone (${plain.outcomes[i].cached})`)
    }
    t.ok(on.engine.tokensComputedAhead > 0, `${on.engine.tokensComputedAhead} positions computed ahead`)
    t.ok(got.requestPositions < plain.requestPositions, `positions computed by the requests: ${got.requestPositions} with next turns ahead, ${plain.requestPositions} with the prompt cache alone`)
  })
}

t.test('a turn computed ahead is kept as computed: one copy, of the cached prefix it starts from', async t => {
  const dir = withChatTemplate(t.testdir({}), storiesModelDir())
  const on = await engineFor(dir)
  const story: ChatMessage[] = [{ role: 'user', content: USER_TURNS[0] }]
  const reply = await on.generate(story, 40)
  const layout = on.engine.cacheLayout
  const gather = layout.gather.bind(layout)
  let copies = 0
  layout.gather = rows => { copies++; return gather(rows) }
  const next = nextTurnStart(story, reply.text)
  on.engine.prepareNextTurn(next)
  await on.engine.idle()
  t.ok(on.engine.tokensComputedAhead > 0, `${on.engine.tokensComputedAhead} positions computed ahead`)
  t.equal(copies, 1, 'the reply\'s cached prefix taken; what was computed kept without a copy (a whole cache each)')
  layout.gather = gather
  const followUp = [...stripEarlierThinking([...story, { role: 'assistant', content: reply.text }]), { role: 'user' as const, content: USER_TURNS[1] }]
  const got = await on.generate(followUp, 20)
  t.equal(got.cached, nextTurnIds(next, turn => on.engine.encodePrompt({ messages: turn })).length, 'the next turn reuses all of it')
  t.same({ ...got, cached: 0 }, { ...await (await engineFor(dir, { prefixCache: false, device: referenceDevice() })).generate(followUp, 20), cached: 0 }, 'the same reply as without a cache')
})

t.test('a request arriving while a next turn is computed ahead waits at most one chunk; what was computed is kept; replies unchanged', async t => {
  const dir = withChatTemplate(t.testdir({}), storiesModelDir())
  const story: ChatMessage[] = [{ role: 'user', content: USER_TURNS[0] }]
  const other: ChatMessage[] = [{ role: 'user', content: 'Lily and Tom went to the park to play with a big red ball.' }]
  const off = await engineFor(dir, { prefixCache: false, device: referenceDevice() })
  const long = await off.generate(story, 300)
  const expectedOther = await off.generate(other, 20)
  const followUp = [...stripEarlierThinking([...story, { role: 'assistant', content: long.text }]), { role: 'user' as const, content: USER_TURNS[1] }]
  const expectedFollowUp = await off.generate(followUp, 20)

  const on = await engineFor(dir)
  t.same({ ...(await on.generate(story, 300)), cached: 0 }, { ...long, cached: 0 })
  const next = nextTurnStart(story, long.text)
  const aheadLength = nextTurnIds(next, turn => on.engine.encodePrompt({ messages: turn })).length
  t.ok(aheadLength > 2 * AHEAD_CHUNK, `the conversation (${aheadLength} tokens) takes several chunks`)
  // The other request arrives during the first chunk computed ahead.
  let otherReply: Promise<Outcome> | null = null
  on.runs.beforeRun = () => { otherReply = on.generate(other, 20) }
  on.engine.prepareNextTurn(next)
  await on.engine.idle()
  t.ok(otherReply, 'the other request arrived while computing ahead')
  t.same({ ...(await otherReply!), cached: 0 }, { ...expectedOther, cached: 0 }, 'the other request: the same reply')
  t.equal(on.engine.tokensComputedAhead, AHEAD_CHUNK, 'computing ahead stopped after the chunk it was in')
  const got = await on.generate(followUp, 20)
  t.same({ ...got, cached: 0 }, { ...expectedFollowUp, cached: 0 }, 'the next turn: the same reply')
  t.ok(got.cached >= AHEAD_CHUNK, `the next turn reused what was computed ahead before the interruption (${got.cached} tokens)`)
})

t.test('nothing is computed ahead without a prefix cache, or for a conversation that would fill the context', async t => {
  const dir = storiesModelDir()
  const off = await engineFor(dir, { prefixCache: false })
  off.engine.prepareNextTurn([{ role: 'user', content: 'Hello' }, { role: 'assistant', content: 'Hi there, friend.' }])
  await off.engine.idle()
  t.equal(off.engine.tokensComputedAhead, 0, 'PREFIX_CACHE=0')
  const on = await engineFor(dir)
  on.engine.prepareNextTurn([{ role: 'user', content: 'Hello '.repeat(on.engine.contextLength) }, { role: 'assistant', content: 'Hi.' }])
  await on.engine.idle()
  t.equal(on.engine.tokensComputedAhead, 0, 'longer than the context')
  t.equal(on.engine.prefixes?.size, 0, 'nothing kept')
})

t.test('pending conversations: the newest goes first, and the oldest gives way beyond MAX_PENDING', async t => {
  const pending = new NextTurns<number[]>()
  for (let i = 0; i <= MAX_PENDING; i++) pending.add([i])
  t.equal(pending.size, MAX_PENDING)
  const order: number[] = []
  for (let ids = pending.take(); ids; ids = pending.take()) order.push(ids[0])
  t.same(order, Array.from({ length: MAX_PENDING }, (_, i) => MAX_PENDING - i), 'newest first; conversation 0 was dropped')
})

t.test('a conversation that cannot fit the KV budget is not computed ahead, and nothing cached is evicted for it', async t => {
  const dir = storiesModelDir()
  const probe = await engineFor(dir, { prefixCache: false })
  const perToken = kvBytesPerToken(probe.engine.model, probe.engine.session.cacheType)
  const story: ChatMessage[] = [{ role: 'user', content: USER_TURNS[0] }]
  const other: ChatMessage[] = [{ role: 'user', content: USER_TURNS[2] }]
  const storyTokens = probe.engine.encodePrompt({ messages: story }).length
  const otherTokens = probe.engine.encodePrompt({ messages: other }).length
  // Room for the story's request beside both cached conversations, not for a long reply's conversation.
  const entry = (prompt: number): number => prompt + 8 + SLOT_SLACK
  const on = await engineFor(dir, { kvCacheBytes: (KvBudget.reserveOf(storyTokens, 8) + entry(storyTokens) + entry(otherTokens) + 10) * perToken })
  await on.generate(other, 8)
  const reply = await on.generate(story, 8)
  t.equal(on.engine.prefixes?.size, 2, 'both conversations are cached')
  on.engine.prepareNextTurn(nextTurnStart(story, reply.text + ' and then'.repeat(60)))
  await on.engine.idle()
  t.equal(on.engine.tokensComputedAhead, 0, 'nothing computed ahead')
  t.equal(on.engine.prefixes?.size, 2, 'no entry was evicted for it')
})

t.test('through the API: the second turn reuses the first reply, whether it was streamed or not', async t => {
  const key = `sk-chatd-${'nextTurn'.repeat(3)}abcdefgh`
  // The default model's form (int4, prompts on the int8 prompt graph): there the prompt cache alone keeps no reply.
  const { url } = await startStoriesServer(t, { modelId: 'stories', key, threads: 1, modelDir: storiesPromptGraphModelDir(), dtype: 'q4' })
  const ask = async (messages: ChatMessage[], stream: boolean): Promise<{ content: string; prompt: number; cached: number }> => {
    const res = await fetch(`${url}/api/v1/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'stories', messages, temperature: 0, max_tokens: 40, stream, ...(stream ? { stream_options: { include_usage: true } } : {}) }),
    })
    t.equal(res.status, 200)
    if (!stream) {
      const body = await res.json() as { choices: Array<{ message: { content: string } }>; usage: { prompt_tokens: number; prompt_tokens_details: { cached_tokens: number } } }
      return { content: body.choices[0].message.content, prompt: body.usage.prompt_tokens, cached: body.usage.prompt_tokens_details.cached_tokens }
    }
    let content = ''
    let usage = { prompt_tokens: 0, prompt_tokens_details: { cached_tokens: -1 } }
    for (const line of (await res.text()).split('\n')) {
      if (!line.startsWith('data: {')) continue
      const chunk = JSON.parse(line.slice(6)) as { choices: Array<{ delta: { content?: string } }>; usage?: typeof usage }
      content += chunk.choices[0]?.delta.content ?? ''
      if (chunk.usage) usage = chunk.usage
    }
    return { content, prompt: usage.prompt_tokens, cached: usage.prompt_tokens_details.cached_tokens }
  }
  for (const stream of [false, true]) {
    const first: ChatMessage[] = [{ role: 'user', content: `${stream ? 'Lily' : 'Max'} found a big red ball in the garden.` }]
    const reply = await ask(first, stream)
    t.ok(reply.content.length > 0)
    // A user reads the answer and types: the engine is idle meanwhile.
    await new Promise(resolve => setTimeout(resolve, 300))
    const newMessage = 'What did the dog do next?'
    const second = await ask([...first, { role: 'assistant', content: reply.content }, { role: 'user', content: newMessage }], stream)
    const newTokens = second.prompt - second.cached
    t.ok(newTokens > 0 && newTokens <= 20, `stream ${stream}: turn 2 computed ${newTokens} of its ${second.prompt} prompt tokens (its new message and the reply's opening)`)
  }
  const metrics = await (await fetch(`${url}/metrics`)).text()
  const ahead = Number(/chatd_prompt_tokens_computed_ahead_total\{model="stories"\} (\d+)/.exec(metrics)?.[1])
  t.ok(ahead > 0, `/metrics: ${ahead} prompt positions computed ahead`)
  t.match(metrics, /# TYPE chatd_prompt_tokens_computed_ahead_total counter/)
})
