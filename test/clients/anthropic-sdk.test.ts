// Anthropic's official SDK (@anthropic-ai/sdk), unchanged, pointed at chatd's /api with a chatd
// key: messages.create and messages.stream, a forced tool and its tool_result sent back, thinking
// blocks whose signature chatd reads back, count_tokens, and errors raised as the SDK's own error
// classes. Through a scripted chat-completions upstream, and on the real stories260k engine.
import type { AddressInfo } from 'node:net'
import Anthropic from '@anthropic-ai/sdk'
import t from 'tap'
import { ApiError } from '../../src/errors.ts'
import { buildTestApp } from '../helpers/app.ts'
import { ScriptedBackend } from '../helpers/scripted-backend.ts'
import { startStoriesServer } from '../helpers/stories-server.ts'
import { ANSWER, callThenAnswer, MODEL, relayThroughChatd, sentBodies } from './harness.ts'

const client = (baseURL: string, apiKey: string) => new Anthropic({ apiKey, baseURL: baseURL.replace(/\/v1$/, ''), maxRetries: 0 })

const weather: Anthropic.Tool = {
  name: 'get_weather',
  description: 'The weather in a city.',
  input_schema: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
}

t.test('a forced tool, its result sent back, the final answer: create and stream', async t => {
  const relay = await relayThroughChatd(t)
  const anthropic = client(relay.baseURL, relay.key)
  const question: Anthropic.MessageParam = { role: 'user', content: 'What is the weather in Oslo?' }

  const called = await anthropic.messages.create({ model: MODEL, max_tokens: 256, messages: [question], tools: [weather], tool_choice: { type: 'any' } })
  t.equal(called.stop_reason, 'tool_use')
  const use = called.content.find((b): b is Anthropic.ToolUseBlock => b.type === 'tool_use')!
  t.match(use.id, /^toolu_/)
  t.equal(use.name, 'get_weather')
  t.same(use.input, { city: 'Oslo' }, 'the input is the parsed arguments')
  t.equal(sentBodies(relay.upstream)[0].tool_choice, 'required', 'any is required upstream')

  const answered = await anthropic.messages.create({
    model: MODEL,
    max_tokens: 256,
    tools: [weather],
    messages: [question, { role: 'assistant', content: called.content }, { role: 'user', content: [{ type: 'tool_result', tool_use_id: use.id, content: '{"temp":3}' }] }],
  })
  t.equal(answered.stop_reason, 'end_turn')
  t.same(answered.content, [{ type: 'text', text: ANSWER }])
  const upstreamTurn = sentBodies(relay.upstream)[1]
  const result = upstreamTurn.messages.find((m: { role: string }) => m.role === 'tool')
  t.same([result.tool_call_id, result.content], [use.id, '{"temp":3}'], 'the result went upstream answering the call')
  t.equal(upstreamTurn.messages.find((m: { role: string }) => m.role === 'assistant').tool_calls[0].id, use.id)

  // The stream: the SDK's own accumulation gives the same message, the input in JSON pieces.
  const stream = anthropic.messages.stream({ model: MODEL, max_tokens: 256, messages: [question], tools: [weather], tool_choice: { type: 'tool', name: 'get_weather' } })
  const pieces: string[] = []
  stream.on('inputJson', partial => pieces.push(partial))
  const streamed = await stream.finalMessage()
  t.equal(streamed.stop_reason, 'tool_use')
  t.same(streamed.content.map(b => b.type === 'tool_use' ? { name: b.name, input: b.input } : b), [{ name: 'get_weather', input: { city: 'Oslo' } }])
  t.ok(pieces.length >= 2, `the input streamed in pieces (${pieces.length})`)
  t.same(sentBodies(relay.upstream)[2].tool_choice, { type: 'function', function: { name: 'get_weather' } })
  t.same(streamed.usage, { ...called.usage }, 'usage as the whole message reports it')
})

t.test('thinking: its signature is chatd\'s, read back for this account only', async t => {
  const relay = await relayThroughChatd(t, callThenAnswer({ calls: ['{"city":"Oslo"}'], reasoning: 'The user wants Oslo.' }))
  const anthropic = client(relay.baseURL, relay.key)
  const question: Anthropic.MessageParam = { role: 'user', content: 'Weather in Oslo?' }
  const first = await anthropic.messages.create({ model: MODEL, max_tokens: 256, messages: [question], tools: [weather], thinking: { type: 'enabled', budget_tokens: 1024 } })
  const thinking = first.content[0] as Anthropic.ThinkingBlock
  t.equal(thinking.type, 'thinking')
  t.equal(thinking.thinking, 'The user wants Oslo.')
  t.match(thinking.signature, /^chatd1\./)
  t.equal(sentBodies(relay.upstream)[0].reasoning_effort, 'low', 'a 1024-token budget is low effort')

  const streamed = await anthropic.messages.stream({ model: MODEL, max_tokens: 256, messages: [question], tools: [weather], thinking: { type: 'adaptive', display: 'omitted' } as never }).finalMessage()
  t.match(streamed.content[0], { type: 'thinking', thinking: '' }, 'display omitted: no text')
  t.match((streamed.content[0] as Anthropic.ThinkingBlock).signature, /^chatd1\./, 'the signature is still there')

  // Sent back (the SDK's blocks as they came, and a forged one): accepted, nothing of it upstream.
  const use = first.content.find((b): b is Anthropic.ToolUseBlock => b.type === 'tool_use')!
  for (const signature of [thinking.signature, 'forged-signature', thinking.signature.slice(0, -4) + 'AAAA']) {
    const back = await anthropic.messages.create({
      model: MODEL,
      max_tokens: 256,
      tools: [weather],
      messages: [question, { role: 'assistant', content: [{ ...thinking, signature }, use] }, { role: 'user', content: [{ type: 'tool_result', tool_use_id: use.id, content: 'sunny' }] }],
    })
    t.same(back.content, [{ type: 'text', text: ANSWER }], `signature ${signature.slice(0, 12)}…: accepted`)
    t.notMatch(JSON.stringify(sentBodies(relay.upstream).at(-1)), 'The user wants Oslo', 'earlier thinking is not sent on')
  }
})

t.test('count_tokens and the SDK\'s error classes', async t => {
  let open!: () => void
  const gate = new Promise<void>(resolve => { open = resolve })
  const gated = new ScriptedBackend({ id: 'gated', firstGate: gate })
  const test = await buildTestApp(t, { backends: [new ScriptedBackend(), gated, new ScriptedBackend({ id: 'failing', failAfter: { deltas: 1, error: new ApiError('upstream_error', 'The upstream went away.') } })], env: { QUEUE_SIZE: '1' } })
  await test.app.listen({ port: 0, host: '127.0.0.1' })
  const baseURL = `http://127.0.0.1:${(test.app.server.address() as AddressInfo).port}/api`
  const anthropic = client(baseURL, test.key)
  const ask = { model: 'scripted', max_tokens: 16, messages: [{ role: 'user' as const, content: 'Hi there' }] }

  const counted = await anthropic.messages.countTokens({ model: 'scripted', messages: ask.messages, system: 'Be brief.' })
  t.ok(counted.input_tokens > 0, `count_tokens: ${counted.input_tokens}`)

  const rejects = async (call: Promise<unknown>, cls: new (...args: never[]) => Error, status: number, type: string, what: string) => {
    const err = await call.then(() => undefined, (e: unknown) => e)
    t.ok(err instanceof cls, `${what}: ${cls.name} (got ${String(err)})`)
    const apiErr = err as InstanceType<typeof Anthropic.APIError>
    t.equal(apiErr.status, status, what)
    t.equal((apiErr.error as { error?: { type?: string } })?.error?.type, type, what)
    return apiErr
  }
  await rejects(client(baseURL, 'sk-chatd-notakey').messages.create(ask), Anthropic.AuthenticationError, 401, 'authentication_error', 'a wrong key')
  await rejects(anthropic.messages.create({ ...ask, model: 'nope' }), Anthropic.NotFoundError, 404, 'not_found_error', 'an unknown model')
  const image = await rejects(anthropic.messages.create({ ...ask, messages: [{ role: 'user', content: [{ type: 'image', source: { type: 'base64', media_type: 'image/png', data: 'iVBORw0KGgo=' } }] }] }),
    Anthropic.BadRequestError, 400, 'invalid_request_error', 'an image')
  t.match(image.message, /messages\[0\]\.content\[0\]: image blocks are not supported/)

  const busy = anthropic.messages.create({ ...ask, model: 'gated' })
  await gated.whenRunning(1) // it holds the queue's one place
  const overloaded = await rejects(anthropic.messages.create({ ...ask, model: 'gated' }), Anthropic.InternalServerError, 529, 'overloaded_error', 'a full queue')
  t.ok(Number(overloaded.headers?.get('retry-after')) > 0, 'Retry-After is kept')
  open()
  await busy

  // A failure once the stream has started: the SDK raises it from the error event.
  const failed = await anthropic.messages.stream({ ...ask, model: 'failing' }).finalMessage().then(() => undefined, (e: unknown) => e)
  t.ok(failed instanceof Anthropic.APIError, `an error event: ${String(failed)}`)
  t.match(String((failed as Error).message), /The upstream went away/)
})

t.test('stories260k: create and stream give the same greedy text; a forced tool\'s input is valid', async t => {
  const key = `sk-chatd-${'messages'.repeat(4)}`
  const server = await startStoriesServer(t, { modelId: 'stories260k', key })
  const anthropic = client(`${server.url}/api/v1`, key)
  const ask = { model: 'stories260k', max_tokens: 24, temperature: 0, messages: [{ role: 'user' as const, content: 'Once upon a time there was a' }] }
  const whole = await anthropic.messages.create(ask)
  t.equal(whole.content[0].type, 'text')
  t.ok((whole.content[0] as Anthropic.TextBlock).text.length > 0)
  t.ok(whole.usage.input_tokens > 0 && whole.usage.output_tokens > 0 && whole.usage.output_tokens <= 24)
  const streamed = await anthropic.messages.stream(ask).finalMessage()
  t.same(streamed.content, whole.content, 'the deltas add up to the whole message')
  t.equal(streamed.stop_reason, whole.stop_reason)
  t.equal(streamed.usage.output_tokens, whole.usage.output_tokens)
  // Asked again, the prompt is read from the cache: Anthropic's input_tokens leaves those out.
  const again = await anthropic.messages.create(ask)
  t.equal(again.usage.input_tokens + (again.usage.cache_read_input_tokens ?? 0), whole.usage.input_tokens + (whole.usage.cache_read_input_tokens ?? 0), 'the same prompt, split between computed and cached')

  // A stop sequence in the greedy text ends the reply there, and the message says which one.
  const text = (whole.content[0] as Anthropic.TextBlock).text
  const word = text.trim().split(/\s+/)[1]
  const stopped = await anthropic.messages.create({ ...ask, stop_sequences: ['never appears', word] })
  t.equal(stopped.stop_reason, 'stop_sequence')
  t.equal(stopped.stop_sequence, word, 'the stop sequence that matched')
  t.equal((stopped.content[0] as Anthropic.TextBlock).text, text.slice(0, text.indexOf(word)), 'the text before it, without it')
  const stoppedStream = await anthropic.messages.stream({ ...ask, stop_sequences: ['never appears', word] }).finalMessage()
  t.match(stoppedStream, { stop_reason: 'stop_sequence', stop_sequence: word }, 'streamed: message_delta says the same')

  const forcedAsk: Anthropic.MessageCreateParamsNonStreaming = { model: 'stories260k', max_tokens: 256, messages: [{ role: 'user', content: 'Weather?' }], tools: [weather], tool_choice: { type: 'tool', name: 'get_weather' } }
  const forced = await anthropic.messages.create({ ...forcedAsk, temperature: 0 } as Anthropic.MessageCreateParamsNonStreaming)
  const use = forced.content.find((b): b is Anthropic.ToolUseBlock => b.type === 'tool_use')
  t.equal(forced.stop_reason, 'tool_use', 'room enough for the whole call (greedy, so the same every run)')
  t.equal(use?.name, 'get_weather')
  t.match(use?.id, /^toolu_/)
  t.type((use?.input as { city?: unknown }).city, 'string', 'valid against the schema by construction')
})
