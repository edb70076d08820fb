// An upstream that speaks Anthropic's Messages API itself (models.json `"api": "messages"`).
// The real one is a second chatd serving stories260k on /api/v1/messages with the key in
// x-api-key: through the relay, chat completions (whole and streamed) and the Responses door give
// the upstream's own greedy answer, and a stop string comes back named. A scripted Messages
// upstream covers the body chatd sends (system, tool_use and tool_result blocks, tools,
// tool_choice, thinking), tool_use streamed as input_json_delta, stop_sequence, and failures.

import type http from 'node:http'
import t, { type Test } from 'tap'
import OpenAI from 'openai'
import { UpstreamBackend, type UpstreamBackendOptions } from '../../src/engine/upstream/backend.ts'
import { startStoriesServer } from '../helpers/stories-server.ts'
import { sseData, sseHead, type Handler } from './loopback.ts'
import { backendOn, generate, relayApp, relayServer, sentBody } from './relay-app.ts'

const KEY = `sk-chatd-${'wireMsgs'.repeat(4)}`
const UPSTREAM_KEY = `sk-chatd-${'upMsgs01'.repeat(4)}`
const CHAT = '/api/v1/chat/completions'

const upstream = await startStoriesServer(t, { modelId: 'stories260k', key: UPSTREAM_KEY, threads: 1 })

const relay = await relayServer(t, { api: 'messages', upstreamUrl: upstream.url, upstreamKey: UPSTREAM_KEY, upstreamModel: 'stories260k', adminKey: KEY })
const direct = new OpenAI({ apiKey: UPSTREAM_KEY, baseURL: `${upstream.url}/api/v1`, maxRetries: 0 })
const messages = [{ role: 'user' as const, content: 'Once upon a time, there was a dog' }]

t.test('a real Messages upstream (x-api-key): chat completions through it give the upstream\'s own greedy answer', async t => {
  const own = await direct.chat.completions.create({ model: 'stories260k', messages, temperature: 0, max_tokens: 30 })
  const relayed = await relay.client.chat.completions.create({ model: 'relay', messages, temperature: 0, max_tokens: 30 })
  t.ok(own.choices[0].message.content!.length > 20, 'a story came back')
  t.equal(relayed.choices[0].message.content, own.choices[0].message.content)
  t.equal(relayed.choices[0].finish_reason, 'length', 'stop_reason max_tokens')
  t.equal(relayed.usage!.prompt_tokens, own.usage!.prompt_tokens, 'input_tokens (plus cache reads) is the prompt')
  t.equal(relayed.usage!.completion_tokens, 30)

  const stream = await relay.client.chat.completions.create({ model: 'relay', messages, temperature: 0, max_tokens: 30, stream: true })
  let streamed = ''
  let pieces = 0
  for await (const chunk of stream) {
    streamed += chunk.choices[0]?.delta.content ?? ''
    pieces++
  }
  t.equal(streamed, own.choices[0].message.content, 'streamed: the same text')
  t.ok(pieces > 10, `in pieces (${pieces})`)

  const response = await relay.client.responses.create({ model: 'relay', input: messages[0].content, temperature: 0, max_output_tokens: 30 })
  t.equal(response.output_text, own.choices[0].message.content, 'the Responses door works through it too')
})

t.test('stop strings go as stop_sequences; the one that matched comes back', async t => {
  const whole = await direct.chat.completions.create({ model: 'stories260k', messages, temperature: 0, max_tokens: 60 })
  const text = whole.choices[0].message.content!
  const stopped = await relay.client.chat.completions.create({ model: 'relay', messages, temperature: 0, max_tokens: 60, stop: ['.'] })
  t.equal(stopped.choices[0].message.content, text.split('.')[0])
  t.equal(stopped.choices[0].finish_reason, 'stop')
})

t.test('the real upstream\'s refusals are the relay\'s clean errors: an overflow, a wrong key', async t => {
  const long = [{ role: 'user' as const, content: 'word '.repeat(2000) }]
  await t.rejects(relay.client.chat.completions.create({ model: 'relay', messages: long, max_tokens: 10 }), { status: 400, code: 'context_length_exceeded' })
  const res = await relay.app.inject({ method: 'POST', url: CHAT, headers: { authorization: `Bearer ${KEY}` }, payload: { model: 'relay', messages: long, max_tokens: 10 } })
  t.notMatch(res.body, upstream.url)
  t.notMatch(res.body, UPSTREAM_KEY)

  const wrongKey = new UpstreamBackend({ id: 'relay', api: 'messages', baseUrl: `${upstream.url}/api/v1`, apiKey: 'sk-wrong', upstreamModel: 'stories260k', settings: { connectTimeoutMs: 2000, firstByteTimeoutMs: 5000, idleTimeoutMs: 5000, retries: 0 } })
  t.teardown(() => wrongKey.close())
  await t.rejects(generate(wrongKey), { code: 'upstream_error', message: /refused chatd's credentials \(HTTP 401\)/ })
})

// ---------------------------------------------------------------------------
// A scripted Messages upstream

const weatherTool = { type: 'function' as const, function: { name: 'get_weather', description: 'The weather in a city.', parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] } } }

function events (res: http.ServerResponse, list: Array<Record<string, unknown>>): void {
  sseHead(res)
  for (const event of list) res.write(`event: ${String(event.type)}\ndata: ${JSON.stringify(event)}\n\n`)
  res.end()
}

const start = { type: 'message_start', message: { id: 'msg_1', type: 'message', role: 'assistant', content: [], stop_reason: null, usage: { input_tokens: 5, cache_read_input_tokens: 12, output_tokens: 1 } } }
const end = (stopReason: string, extra: Record<string, unknown> = {}) => [
  { type: 'message_delta', delta: { stop_reason: stopReason, stop_sequence: null, ...extra }, usage: { output_tokens: 9 } },
  { type: 'message_stop' },
]

/** tool_use as Anthropic streams it, after a thinking block. */
function streamCall (res: http.ServerResponse): void {
  events(res, [
    start,
    { type: 'content_block_start', index: 0, content_block: { type: 'thinking', thinking: '', signature: '' } },
    { type: 'content_block_delta', index: 0, delta: { type: 'thinking_delta', thinking: 'Need the weather.' } },
    { type: 'content_block_delta', index: 0, delta: { type: 'signature_delta', signature: 'sig' } },
    { type: 'content_block_stop', index: 0 },
    { type: 'ping' },
    { type: 'content_block_start', index: 1, content_block: { type: 'tool_use', id: 'toolu_1', name: 'get_weather', input: {} } },
    { type: 'content_block_delta', index: 1, delta: { type: 'input_json_delta', partial_json: '{"city":' } },
    { type: 'content_block_delta', index: 1, delta: { type: 'input_json_delta', partial_json: '"Oslo"}' } },
    { type: 'content_block_stop', index: 1 },
    ...end('tool_use'),
  ])
}

function streamText (res: http.ServerResponse, text: string, stopReason = 'end_turn', extra: Record<string, unknown> = {}): void {
  events(res, [
    start,
    { type: 'content_block_start', index: 0, content_block: { type: 'text', text: '' } },
    ...[...text].map(c => ({ type: 'content_block_delta', index: 0, delta: { type: 'text_delta', text: c } })),
    { type: 'content_block_stop', index: 0 },
    ...end(stopReason, extra),
  ])
}

const callThenAnswer: Handler = (_req, res, recorded) => {
  const body = JSON.parse(recorded.body) as { messages: Array<{ content: Array<{ type: string }> }> }
  if (body.messages.some(m => m.content.some(b => b.type === 'tool_result'))) streamText(res, 'It is 3 degrees in Oslo.')
  else streamCall(res)
}

const setup = (t: Test, handler: Handler, opts: Partial<UpstreamBackendOptions> = {}) =>
  relayApp(t, handler, { api: 'messages', upstreamModel: 'claude-x', apiKey: 'sk-ant-secret', ...opts })

t.test('the body: POST <baseUrl>/messages with x-api-key and anthropic-version, system, blocks, tools, thinking', async t => {
  const s = await setup(t, callThenAnswer)
  const conversation = [
    { role: 'system', content: 'Use tools.' },
    { role: 'user', content: 'Weather in Oslo and Bergen?' },
    {
      role: 'assistant',
      content: 'Looking.',
      tool_calls: [
        { id: 'call_1', type: 'function', function: { name: 'get_weather', arguments: '{"city":"Oslo"}' } },
        { id: 'call_2', type: 'function', function: { name: 'get_weather', arguments: '{"city":"Bergen"}' } },
      ],
    },
    { role: 'tool', tool_call_id: 'call_1', content: '{"temp":3}' },
    { role: 'tool', tool_call_id: 'call_2', content: '{"temp":5}' },
  ]
  const res = await s.app.inject({
    method: 'POST',
    url: CHAT,
    headers: s.auth,
    payload: { model: 'relay', messages: conversation, tools: [weatherTool], tool_choice: 'required', parallel_tool_calls: false, max_tokens: 5000, temperature: 0.5, top_k: 40, stop: ['END'], reasoning_effort: 'medium' },
  })
  t.equal(res.statusCode, 200, res.body)
  const sent = s.upstream.requests[0]
  t.equal(sent.path, '/v1/messages')
  t.equal(sent.headers['x-api-key'], 'sk-ant-secret')
  t.equal(sent.headers['anthropic-version'], '2023-06-01')
  t.notOk(sent.headers.authorization, 'no Bearer token')
  const body = sentBody(s.upstream)
  t.equal(body.model, 'claude-x')
  t.equal(body.stream, true)
  t.equal(body.system, 'Use tools.')
  t.same(body.messages, [
    { role: 'user', content: [{ type: 'text', text: 'Weather in Oslo and Bergen?' }] },
    {
      role: 'assistant',
      content: [
        { type: 'text', text: 'Looking.' },
        { type: 'tool_use', id: 'call_1', name: 'get_weather', input: { city: 'Oslo' } },
        { type: 'tool_use', id: 'call_2', name: 'get_weather', input: { city: 'Bergen' } },
      ],
    },
    { role: 'user', content: [{ type: 'tool_result', tool_use_id: 'call_1', content: '{"temp":3}' }, { type: 'tool_result', tool_use_id: 'call_2', content: '{"temp":5}' }] },
  ], 'tool results are one user turn')
  t.same(body.tools, [{ name: 'get_weather', description: 'The weather in a city.', input_schema: weatherTool.function.parameters }])
  t.same(body.tool_choice, { type: 'any', disable_parallel_tool_use: true })
  t.equal(body.max_tokens, 5000)
  t.equal(body.temperature, 0.5)
  t.equal(body.top_k, 40)
  t.same(body.stop_sequences, ['END'])
  t.same(body.thinking, { type: 'enabled', budget_tokens: 4096 })
  t.notOk('top_p' in body, 'no top_p the client did not send')
})

t.test('tool_use streamed as input_json_delta, and its round trip with the openai SDK', async t => {
  const s = await setup(t, callThenAnswer)
  const first = await s.client.chat.completions.create({ model: 'relay', messages: [{ role: 'user', content: 'Weather in Oslo?' }], tools: [weatherTool] })
  const choice = first.choices[0]
  t.equal(choice.finish_reason, 'tool_calls')
  t.same(choice.message.tool_calls, [{ id: 'toolu_1', type: 'function', function: { name: 'get_weather', arguments: '{"city":"Oslo"}' } }])
  t.equal((choice.message as unknown as { reasoning_content: string }).reasoning_content, 'Need the weather.', 'the thinking block is the thinking')
  t.same(first.usage, { prompt_tokens: 17, completion_tokens: 9, total_tokens: 26 }, 'input plus cache reads; cached_tokens not relayed without passCacheSalt')

  const second = await s.client.chat.completions.create({
    model: 'relay',
    tools: [weatherTool],
    messages: [{ role: 'user', content: 'Weather in Oslo?' }, choice.message, { role: 'tool', tool_call_id: 'toolu_1', content: '{"temp":3}' }],
  })
  t.equal(second.choices[0].message.content, 'It is 3 degrees in Oslo.')
  t.same(sentBody(s.upstream).messages.slice(1), [
    { role: 'assistant', content: [{ type: 'tool_use', id: 'toolu_1', name: 'get_weather', input: { city: 'Oslo' } }] },
    { role: 'user', content: [{ type: 'tool_result', tool_use_id: 'toolu_1', content: '{"temp":3}' }] },
  ])
})

t.test('stop_sequence is the finish\'s stopSequence; max_tokens is length; the default max_tokens is sent', async t => {
  const stopped = await backendOn(t, 'messages', (_req, res) => streamText(res, 'one two', 'stop_sequence', { stop_sequence: 'END' }))
  t.match((await generate(stopped.backend, { stop: ['END'] })).at(-1), { type: 'finish', reason: 'stop', stopSequence: 'END' })
  t.equal(sentBody(stopped.up).max_tokens, 4096, 'the Messages API requires max_tokens')

  const long = await backendOn(t, 'messages', (_req, res) => streamText(res, 'abc', 'max_tokens'))
  t.match((await generate(long.backend)).at(-1), { type: 'finish', reason: 'length' })
})

t.test('the Messages API cannot carry everything: refused before sending, naming the field', async t => {
  const { up, backend } = await backendOn(t, 'messages', (_req, res) => streamText(res, 'x'))
  await t.rejects(generate(backend, { responseFormat: { type: 'json_object' } }), { code: 'invalid_parameter', param: 'response_format', message: /no JSON mode/ })
  await t.rejects(generate(backend, { logprobs: true }), { code: 'invalid_parameter', param: 'logprobs' })
  await t.rejects(generate(backend, { temperature: 1.5 }), { code: 'invalid_parameter', param: 'temperature' })
  t.equal(up.requests.length, 0)
  await generate(backend, { responseFormat: { type: 'json_schema', json_schema: { name: 'x', schema: { type: 'object' } } } })
  t.same(sentBody(up).output_config, { format: { type: 'json_schema', schema: { type: 'object' } } }, 'a schema goes as output_config.format')
})

t.test('errors in Anthropic\'s shape and stream: overflow, overloaded retried, error event, malformed, oversized', async t => {
  const overflow = await backendOn(t, 'messages', (_req, res) => {
    res.writeHead(400, { 'content-type': 'application/json' })
    res.end(JSON.stringify({ type: 'error', error: { type: 'invalid_request_error', message: 'prompt is too long: 250000 tokens > 200000 maximum' } }))
  })
  await t.rejects(generate(overflow.backend), { code: 'context_length_exceeded', status: 400 })

  let calls = 0
  const overloaded = await backendOn(t, 'messages', (_req, res) => {
    if (calls++ === 0) {
      res.writeHead(529, { 'content-type': 'application/json' })
      res.end(JSON.stringify({ type: 'error', error: { type: 'overloaded_error', message: 'Overloaded' } }))
    } else streamText(res, 'ok')
  })
  t.match((await generate(overloaded.backend)).at(-1), { type: 'finish', reason: 'stop' }, '529 before any byte is retried')
  t.equal(overloaded.up.requests.length, 2)

  const midway = await backendOn(t, 'messages', (_req, res) => events(res, [start, { type: 'error', error: { type: 'overloaded_error', message: 'sk-ant-secret' } }]))
  const err = await generate(midway.backend).catch((e: Error) => e)
  t.match(err, { code: 'upstream_error', message: /reported an error in the middle/ })
  t.notMatch((err as Error).message, 'sk-ant-secret')

  const cut = await backendOn(t, 'messages', (_req, res) => events(res, [start, { type: 'content_block_delta', index: 0, delta: { type: 'text_delta', text: 'Hel' } }]))
  await t.rejects(generate(cut.backend), { code: 'upstream_error', message: /closed the connection before the reply was complete/ })

  const garbage = await backendOn(t, 'messages', (_req, res) => {
    sseHead(res)
    sseData(res, 'not json')
    res.end()
  })
  await t.rejects(generate(garbage.backend), { code: 'upstream_error', message: /not JSON/ })

  const huge = await backendOn(t, 'messages', (_req, res) => {
    sseHead(res)
    sseData(res, { type: 'content_block_delta', index: 0, delta: { type: 'text_delta', text: 'x'.repeat(2 * 1024 * 1024) } })
    res.end()
  })
  await t.rejects(generate(huge.backend), { code: 'upstream_error', message: /an event larger than/ })

  const many = await backendOn(t, 'messages', (_req, res) => events(res, [start, ...Array.from({ length: 200 }, (_, i) => ({ type: 'content_block_start', index: i, content_block: { type: 'tool_use', id: `t${i}`, name: 'f', input: {} } }))]))
  await t.rejects(generate(many.backend), { code: 'upstream_error', message: /too many tool calls/ })
})

t.test('a whole JSON message (an upstream that does not stream) is read too', async t => {
  const { backend } = await backendOn(t, 'messages', (_req, res) => {
    res.writeHead(200, { 'content-type': 'application/json' })
    res.end(JSON.stringify({
      id: 'msg_1',
      type: 'message',
      role: 'assistant',
      content: [{ type: 'text', text: 'Let me check.' }, { type: 'tool_use', id: 'toolu_9', name: 'get_weather', input: { city: 'Oslo' } }],
      stop_reason: 'tool_use',
      usage: { input_tokens: 7, output_tokens: 3 },
    }))
  })
  const out = await generate(backend)
  t.same(out.filter(e => e.type === 'delta'), [
    { type: 'delta', toolCalls: [{ index: 0, id: 'toolu_9', name: 'get_weather', arguments: '{"city":"Oslo"}' }] },
    { type: 'delta', content: 'Let me check.' },
  ])
  t.match(out.at(-1), { type: 'finish', reason: 'tool_calls', usage: { prompt_tokens: 7, completion_tokens: 3 } })
})
