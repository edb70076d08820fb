// An upstream that speaks OpenAI's Responses API itself (models.json `"api": "responses"`).
// The real one is a second chatd serving stories260k on /api/v1/responses: through the relay,
// chat completions (whole and streamed), the Responses door and the Messages door give the
// upstream's own greedy answer, and stop strings (which the Responses API lacks) are applied by
// chatd. A scripted Responses upstream on loopback covers what stories260k cannot do: the body
// chatd sends (instructions, input items with function calls and their outputs, tools, text.format),
// a tool call streamed as response.* events and its round trip, and every way it can fail.

import type http from 'node:http'
import t, { type Test } from 'tap'
import OpenAI from 'openai'
import { parseModelsFile } from '../../src/engine/models-file.ts'
import type { UpstreamBackendOptions } from '../../src/engine/upstream/backend.ts'
import { startStoriesServer } from '../helpers/stories-server.ts'
import { sseData, sseHead, type Handler } from './loopback.ts'
import { backendOn, generate, relayApp, relayServer, sentBody } from './relay-app.ts'

const KEY = `sk-chatd-${'wireResp'.repeat(4)}`
const UPSTREAM_KEY = `sk-chatd-${'upResps1'.repeat(4)}`
const CHAT = '/api/v1/chat/completions'

const upstream = await startStoriesServer(t, { modelId: 'stories260k', key: UPSTREAM_KEY, threads: 1 })

const relay = await relayServer(t, { api: 'responses', upstreamUrl: upstream.url, upstreamKey: UPSTREAM_KEY, upstreamModel: 'stories260k', adminKey: KEY })
const direct = new OpenAI({ apiKey: UPSTREAM_KEY, baseURL: `${upstream.url}/api/v1`, maxRetries: 0 })
const messages = [{ role: 'user' as const, content: 'Once upon a time, there was a dog' }]

t.test('a real Responses upstream: chat completions through it give the upstream\'s own greedy answer', async t => {
  const own = await direct.chat.completions.create({ model: 'stories260k', messages, temperature: 0, max_tokens: 30 })
  const relayed = await relay.client.chat.completions.create({ model: 'relay', messages, temperature: 0, max_tokens: 30 })
  t.ok(own.choices[0].message.content!.length > 20, 'a story came back')
  t.equal(relayed.choices[0].message.content, own.choices[0].message.content)
  t.equal(relayed.choices[0].finish_reason, 'length', 'max_output_tokens ran out: incomplete upstream, length here')
  t.equal(relayed.usage!.prompt_tokens, own.usage!.prompt_tokens, 'the upstream\'s input_tokens')
  t.equal(relayed.usage!.completion_tokens, 30, 'the upstream\'s output_tokens')
  t.equal(relayed.model, 'relay')

  const stream = await relay.client.chat.completions.create({ model: 'relay', messages, temperature: 0, max_tokens: 30, stream: true })
  let streamed = ''
  let pieces = 0
  for await (const chunk of stream) {
    streamed += chunk.choices[0]?.delta.content ?? ''
    pieces++
  }
  t.equal(streamed, own.choices[0].message.content, 'streamed: the same text')
  t.ok(pieces > 10, `in pieces as the upstream streamed them (${pieces})`)
})

t.test('every door works through it: the Responses door and the Messages door', async t => {
  const own = await direct.chat.completions.create({ model: 'stories260k', messages, temperature: 0, max_tokens: 20 })
  const response = await relay.client.responses.create({ model: 'relay', input: messages[0].content, temperature: 0, max_output_tokens: 20 })
  t.equal(response.output_text, own.choices[0].message.content)
  t.equal(response.status, 'incomplete')

  const res = await fetch(`${relay.url}/api/v1/messages`, {
    method: 'POST',
    headers: { 'x-api-key': KEY, 'anthropic-version': '2023-06-01', 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'relay', max_tokens: 20, temperature: 0, messages }),
  })
  const message = await res.json() as { content: Array<{ type: string; text: string }>; stop_reason: string }
  t.equal(res.status, 200)
  t.equal(message.content[0].text, own.choices[0].message.content)
  t.equal(message.stop_reason, 'max_tokens')
})

t.test('stop strings, which the Responses API has not, are applied by chatd', async t => {
  const whole = await direct.chat.completions.create({ model: 'stories260k', messages, temperature: 0, max_tokens: 60 })
  const text = whole.choices[0].message.content!
  t.ok(text.includes('.'), 'the story has a sentence end')
  const stopped = await relay.client.chat.completions.create({ model: 'relay', messages, temperature: 0, max_tokens: 60, stop: ['.'] })
  t.equal(stopped.choices[0].message.content, text.split('.')[0])
  t.equal(stopped.choices[0].finish_reason, 'stop')

  const res = await fetch(`${relay.url}/api/v1/messages`, {
    method: 'POST',
    headers: { 'x-api-key': KEY, 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'relay', max_tokens: 60, temperature: 0, messages, stop_sequences: ['.'] }),
  })
  const message = await res.json() as { content: Array<{ text: string }>; stop_reason: string; stop_sequence: string }
  t.equal(message.content[0].text, text.split('.')[0])
  t.equal(message.stop_reason, 'stop_sequence')
  t.equal(message.stop_sequence, '.', 'the stop string that matched is named')
})

t.test('the real upstream\'s refusal is the relay\'s clean error', async t => {
  const long = [{ role: 'user' as const, content: 'word '.repeat(2000) }]
  await t.rejects(relay.client.chat.completions.create({ model: 'relay', messages: long, max_tokens: 10 }), { status: 400, code: 'context_length_exceeded' })
  const res = await relay.app.inject({ method: 'POST', url: CHAT, headers: { authorization: `Bearer ${KEY}` }, payload: { model: 'relay', messages: long, max_tokens: 10 } })
  t.notMatch(res.body, upstream.url)
  t.notMatch(res.body, UPSTREAM_KEY)
})

// ---------------------------------------------------------------------------
// A scripted Responses upstream

const weatherTool = { type: 'function' as const, function: { name: 'get_weather', description: 'The weather in a city.', parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] } } }

function events (res: http.ServerResponse, list: Array<Record<string, unknown>>, opts: { end?: boolean } = {}): void {
  sseHead(res)
  let sequence = 0
  for (const event of list) res.write(`event: ${String(event.type)}\ndata: ${JSON.stringify({ ...event, sequence_number: sequence++ })}\n\n`)
  if (opts.end !== false) res.end()
}

const usage = { input_tokens: 21, input_tokens_details: { cached_tokens: 16 }, output_tokens: 9, output_tokens_details: { reasoning_tokens: 4 }, total_tokens: 30 }

/** A call of get_weather as OpenAI streams it, after some reasoning. */
function streamCall (res: http.ServerResponse): void {
  const item = { id: 'fc_1', type: 'function_call', status: 'in_progress', call_id: 'call_up1', name: 'get_weather', arguments: '' }
  events(res, [
    { type: 'response.created', response: { id: 'resp_1', status: 'in_progress', output: [] } },
    { type: 'response.output_item.added', output_index: 0, item: { id: 'rs_1', type: 'reasoning', summary: [] } },
    { type: 'response.reasoning_summary_text.delta', item_id: 'rs_1', output_index: 0, summary_index: 0, delta: 'Need the weather.' },
    { type: 'response.output_item.done', output_index: 0, item: { id: 'rs_1', type: 'reasoning', summary: [{ type: 'summary_text', text: 'Need the weather.' }] } },
    { type: 'response.output_item.added', output_index: 1, item },
    { type: 'response.function_call_arguments.delta', item_id: 'fc_1', output_index: 1, delta: '{"city":' },
    { type: 'response.function_call_arguments.delta', item_id: 'fc_1', output_index: 1, delta: '"Oslo"}' },
    { type: 'response.function_call_arguments.done', item_id: 'fc_1', output_index: 1, arguments: '{"city":"Oslo"}' },
    { type: 'response.output_item.done', output_index: 1, item: { ...item, status: 'completed', arguments: '{"city":"Oslo"}' } },
    { type: 'response.completed', response: { id: 'resp_1', status: 'completed', output: [], usage } },
  ])
}

function streamText (res: http.ServerResponse, text: string, opts: { status?: string } = {}): void {
  const item = { id: 'msg_1', type: 'message', role: 'assistant', status: 'in_progress', content: [] }
  events(res, [
    { type: 'response.created', response: { id: 'resp_2', status: 'in_progress', output: [] } },
    { type: 'response.output_item.added', output_index: 0, item },
    { type: 'response.content_part.added', item_id: 'msg_1', output_index: 0, content_index: 0, part: { type: 'output_text', text: '' } },
    ...[...text].map(c => ({ type: 'response.output_text.delta', item_id: 'msg_1', output_index: 0, content_index: 0, delta: c })),
    { type: 'response.output_text.done', item_id: 'msg_1', output_index: 0, content_index: 0, text },
    opts.status === 'incomplete'
      ? { type: 'response.incomplete', response: { id: 'resp_2', status: 'incomplete', incomplete_details: { reason: 'max_output_tokens' }, output: [], usage } }
      : { type: 'response.completed', response: { id: 'resp_2', status: 'completed', output: [], usage } },
  ])
}

/** Answers with a call first, and with text once the input carries the call's output. */
const callThenAnswer: Handler = (_req, res, recorded) => {
  const body = JSON.parse(recorded.body) as { input: Array<{ type: string }> }
  if (body.input.some(item => item.type === 'function_call_output')) streamText(res, 'It is 3 degrees in Oslo.')
  else streamCall(res)
}

const setup = (t: Test, handler: Handler, opts: Partial<UpstreamBackendOptions> = {}) =>
  relayApp(t, handler, { api: 'responses', upstreamModel: 'upstream-model', apiKey: 'sk-up-secret', ...opts })

t.test('the body: POST <baseUrl>/responses with Bearer, instructions, input items, tools, text.format', async t => {
  const s = await setup(t, callThenAnswer)
  const conversation = [
    { role: 'system', content: 'Use tools.' },
    { role: 'user', content: 'Weather in Oslo?' },
    { role: 'assistant', content: null, tool_calls: [{ id: 'call_1', type: 'function', function: { name: 'get_weather', arguments: '{"city":"Oslo"}' } }] },
    { role: 'tool', tool_call_id: 'call_1', content: '{"temp":3}' },
  ]
  const res = await s.app.inject({
    method: 'POST',
    url: CHAT,
    headers: s.auth,
    payload: {
      model: 'relay',
      messages: conversation,
      tools: [weatherTool],
      tool_choice: { type: 'function', function: { name: 'get_weather' } },
      parallel_tool_calls: false,
      max_tokens: 50,
      temperature: 0.5,
      reasoning_effort: 'low',
      response_format: { type: 'json_schema', json_schema: { name: 'w', schema: { type: 'object' }, strict: true } },
    },
  })
  t.equal(res.statusCode, 200, res.body)
  const sent = s.upstream.requests[0]
  t.equal(sent.path, '/v1/responses')
  t.equal(sent.headers.authorization, 'Bearer sk-up-secret')
  const body = sentBody(s.upstream)
  t.equal(body.model, 'upstream-model')
  t.equal(body.stream, true)
  t.equal(body.store, false, 'nothing is kept upstream: chatd sends the whole conversation')
  t.equal(body.instructions, 'Use tools.')
  t.same(body.input, [
    { type: 'message', role: 'user', content: 'Weather in Oslo?' },
    { type: 'function_call', call_id: 'call_1', name: 'get_weather', arguments: '{"city":"Oslo"}' },
    { type: 'function_call_output', call_id: 'call_1', output: '{"temp":3}' },
  ])
  t.same(body.tools, [{ type: 'function', name: 'get_weather', description: 'The weather in a city.', parameters: weatherTool.function.parameters }])
  t.same(body.tool_choice, { type: 'function', name: 'get_weather' })
  t.equal(body.parallel_tool_calls, false)
  t.equal(body.max_output_tokens, 50)
  t.equal(body.temperature, 0.5)
  t.notOk('top_p' in body, 'no top_p the client did not send')
  t.same(body.reasoning, { effort: 'low' })
  t.same(body.text, { format: { type: 'json_schema', name: 'w', schema: { type: 'object' }, strict: true } })
  t.notOk('stop' in body, 'the Responses API has no stop')
})

t.test('a tool call streamed as response.* events, and its round trip with the openai SDK', async t => {
  const s = await setup(t, callThenAnswer)
  const first = await s.client.chat.completions.create({ model: 'relay', messages: [{ role: 'user', content: 'Weather in Oslo?' }], tools: [weatherTool] })
  const choice = first.choices[0]
  t.equal(choice.finish_reason, 'tool_calls')
  t.same(choice.message.tool_calls, [{ id: 'call_up1', type: 'function', function: { name: 'get_weather', arguments: '{"city":"Oslo"}' } }])
  t.equal((choice.message as unknown as { reasoning_content: string }).reasoning_content, 'Need the weather.', 'the reasoning summary is the thinking')
  t.same(first.usage, { prompt_tokens: 21, completion_tokens: 9, total_tokens: 30, completion_tokens_details: { reasoning_tokens: 4 } },
    'the upstream\'s usage; its cached_tokens are not relayed without passCacheSalt')

  const stream = await s.client.chat.completions.create({ model: 'relay', messages: [{ role: 'user', content: 'Weather in Oslo?' }], tools: [weatherTool], stream: true })
  const pieces: string[] = []
  let finish: string | null | undefined
  for await (const chunk of stream) {
    for (const call of chunk.choices[0]?.delta.tool_calls ?? []) pieces.push(call.function?.arguments ?? '')
    finish = chunk.choices[0]?.finish_reason ?? finish
  }
  t.same(pieces.filter(p => p !== ''), ['{"city":', '"Oslo"}'], 'arguments stream in the upstream\'s pieces')
  t.equal(finish, 'tool_calls')

  const second = await s.client.chat.completions.create({
    model: 'relay',
    tools: [weatherTool],
    messages: [{ role: 'user', content: 'Weather in Oslo?' }, choice.message, { role: 'tool', tool_call_id: 'call_up1', content: '{"temp":3}' }],
  })
  t.equal(second.choices[0].message.content, 'It is 3 degrees in Oslo.')
  t.equal(second.choices[0].finish_reason, 'stop')
  const items = sentBody(s.upstream).input as Array<Record<string, unknown>>
  t.same(items.slice(1), [
    { type: 'function_call', call_id: 'call_up1', name: 'get_weather', arguments: '{"city":"Oslo"}' },
    { type: 'function_call_output', call_id: 'call_up1', output: '{"temp":3}' },
  ], 'the call and its output went back as items')

  // The Responses door on top of the Responses wire returns the call as a function_call item.
  const response = await s.client.responses.create({ model: 'relay', input: 'Weather in Oslo?', tools: [{ type: 'function', name: 'get_weather', parameters: weatherTool.function.parameters, strict: false }] })
  const call = response.output.find(item => item.type === 'function_call')
  t.match(call, { call_id: 'call_up1', name: 'get_weather', arguments: '{"city":"Oslo"}' })
})

t.test('with passCacheSalt the cache scope goes as cache_salt and cached_tokens are relayed', async t => {
  const s = await setup(t, (_req, res) => streamText(res, 'Hi'), { passCacheSalt: true })
  const reply = await s.client.chat.completions.create({ model: 'relay', messages: [{ role: 'user', content: 'Hi' }] })
  t.equal(reply.usage?.prompt_tokens_details?.cached_tokens, 16)
  t.type(sentBody(s.upstream).cache_salt, 'string')
})

t.test('how it ended: incomplete is length; a stop string split across deltas is cut and named', async t => {
  const incomplete = await backendOn(t, 'responses', (_req, res) => streamText(res, 'abc', { status: 'incomplete' }))
  t.match((await generate(incomplete.backend)).at(-1), { type: 'finish', reason: 'length' })

  const stopped = await backendOn(t, 'responses', (_req, res) => streamText(res, 'one END two'))
  const out = await generate(stopped.backend, { stop: ['END'] })
  t.equal(out.map(e => e.type === 'delta' ? e.content ?? '' : '').join(''), 'one ')
  t.match(out.at(-1), { type: 'finish', reason: 'stop', stopSequence: 'END' })
  t.ok(await stopped.up.settled(), 'the upstream request is closed')
})

t.test('errors: in the Responses API\'s error shape, mid-stream, malformed, oversized, refused before sending', async t => {
  const overflow = await backendOn(t, 'responses', (_req, res) => {
    res.writeHead(400, { 'content-type': 'application/json' })
    res.end(JSON.stringify({ error: { message: 'Your input exceeds the context window of this model.', type: 'invalid_request_error', param: 'input', code: 'context_length_exceeded' } }))
  })
  await t.rejects(generate(overflow.backend), { code: 'context_length_exceeded', status: 400 })

  const format = await backendOn(t, 'responses', (_req, res) => {
    res.writeHead(400, { 'content-type': 'application/json' })
    res.end(JSON.stringify({ error: { message: 'Invalid schema', type: 'invalid_request_error', param: 'text.format.schema', code: 'invalid_json_schema' } }))
  })
  await t.rejects(generate(format.backend), { code: 'invalid_parameter', param: 'response_format' }, 'a refused text.format is the client\'s response_format')

  let calls = 0
  const flaky = await backendOn(t, 'responses', (_req, res) => {
    if (calls++ === 0) {
      res.writeHead(503, { 'content-type': 'application/json' })
      res.end('{"error":{"message":"busy"}}')
    } else streamText(res, 'ok')
  })
  t.match((await generate(flaky.backend)).at(-1), { type: 'finish', reason: 'stop' }, 'a 503 before any byte is retried')
  t.equal(flaky.up.requests.length, 2)

  const failed = await backendOn(t, 'responses', (_req, res) => events(res, [
    { type: 'response.output_text.delta', item_id: 'm', output_index: 0, content_index: 0, delta: 'Hel' },
    { type: 'response.failed', response: { status: 'failed', error: { code: 'server_error', message: 'sk-up-secret at 10.0.0.1' } } },
  ]))
  const err = await generate(failed.backend).catch((e: Error) => e)
  t.match(err, { code: 'upstream_error', message: /reported an error in the middle/ })
  t.notMatch((err as Error).message, 'sk-up-secret')

  const cut = await backendOn(t, 'responses', (_req, res) => events(res, [{ type: 'response.output_text.delta', delta: 'Hel' }]))
  await t.rejects(generate(cut.backend), { code: 'upstream_error', message: /closed the connection before the reply was complete/ }, 'no response.completed: cut off')

  const garbage = await backendOn(t, 'responses', (_req, res) => events(res, [{ type: 'response.output_text.delta', delta: 42 }]))
  await t.rejects(generate(garbage.backend), { code: 'upstream_error', message: /"delta" is not text/ })

  const huge = await backendOn(t, 'responses', (_req, res) => {
    sseHead(res)
    sseData(res, { type: 'response.output_text.delta', delta: 'x'.repeat(2 * 1024 * 1024) })
    res.end()
  })
  await t.rejects(generate(huge.backend), { code: 'upstream_error', message: /an event larger than/ })

  const many = await backendOn(t, 'responses', (_req, res) => events(res, Array.from({ length: 200 }, (_, i) => ({ type: 'response.output_item.added', output_index: i, item: { id: `fc_${i}`, type: 'function_call', call_id: `c${i}`, name: 'f', arguments: '' } }))))
  await t.rejects(generate(many.backend), { code: 'upstream_error', message: /too many tool calls/ })

  const quiet = await backendOn(t, 'responses', (_req, res) => streamText(res, 'x'))
  await t.rejects(generate(quiet.backend, { logprobs: true }), { code: 'invalid_parameter', param: 'logprobs' }, 'logprobs are refused before anything is sent')
  t.equal(quiet.up.requests.length, 0)
})

t.test('a whole JSON response (an upstream that does not stream) is read too', async t => {
  const { backend } = await backendOn(t, 'responses', (_req, res) => {
    res.writeHead(200, { 'content-type': 'application/json' })
    res.end(JSON.stringify({
      id: 'resp_1',
      object: 'response',
      status: 'completed',
      output: [
        { type: 'reasoning', id: 'rs', summary: [{ type: 'summary_text', text: 'Hmm.' }] },
        { type: 'message', id: 'm', role: 'assistant', content: [{ type: 'output_text', text: 'Hello' }] },
      ],
      usage,
    }))
  })
  const out = await generate(backend)
  t.same(out.filter(e => e.type === 'delta'), [{ type: 'delta', reasoning: 'Hmm.', content: 'Hello' }])
  t.match(out.at(-1), { type: 'finish', reason: 'stop', usage: { prompt_tokens: 21, completion_tokens: 9 } })
})

t.test('models.json: "api" is chat, responses or messages; anything else names the field', async t => {
  const entry = { id: 'up', backend: 'openai', baseUrl: 'http://127.0.0.1:1/v1', upstreamModel: 'm' }
  t.equal(parseModelsFile(JSON.stringify({ models: [{ ...entry, api: 'responses' }] }), {})[0].entry.backend, 'openai')
  t.throws(() => parseModelsFile(JSON.stringify({ models: [{ ...entry, api: 'soap' }] }), {}), /"api" .*\("chat", "responses", "messages"\)/)
})
