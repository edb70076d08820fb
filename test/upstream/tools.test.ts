// Tools through an upstream model: tools, tool_choice, parallel_tool_calls and tool turns are
// passed on; the upstream's tool calls come back whole and streamed (the openai SDK's stream
// helper assembles them, its runTools loop sends the result back); the token cap goes as
// max_completion_tokens to OpenAI's own API; sampling fields the client did not send are not sent.
import type http from 'node:http'
import t from 'tap'
import type OpenAI from 'openai'
import { sendsMaxCompletionTokens, upstreamBody } from '../../src/engine/upstream/request-body.ts'
import { chunk, sseData, sseHead, type Handler } from './loopback.ts'
import { relayApp, sentBody } from './relay-app.ts'

const CHAT = '/api/v1/chat/completions'
const weatherTool = { type: 'function' as const, function: { name: 'get_weather', description: 'The weather in a city.', parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] } } }

/** Streams a call of get_weather as OpenAI does: id and name first, then the arguments in pieces. */
function streamCall (res: http.ServerResponse, opts: { usage?: Record<string, unknown> } = {}): void {
  sseHead(res)
  sseData(res, chunk({ role: 'assistant', content: null }))
  sseData(res, chunk({ tool_calls: [{ index: 0, id: 'call_up1', type: 'function', function: { name: 'get_weather', arguments: '' } }] }))
  sseData(res, chunk({ tool_calls: [{ index: 0, function: { arguments: '{"city":' } }] }))
  sseData(res, chunk({ tool_calls: [{ index: 0, function: { arguments: '"Oslo"}' } }] }))
  sseData(res, chunk({}, 'tool_calls'))
  sseData(res, { id: 'x', object: 'chat.completion.chunk', created: 1, model: 'm', choices: [], usage: { prompt_tokens: 20, completion_tokens: 9, total_tokens: 29, ...opts.usage } })
  sseData(res, '[DONE]')
  res.end()
}

function streamText (res: http.ServerResponse, text: string): void {
  sseHead(res)
  sseData(res, chunk({ role: 'assistant', content: '' }))
  sseData(res, chunk({ content: text }))
  sseData(res, chunk({}, 'stop'))
  sseData(res, '[DONE]')
  res.end()
}

/** Answers with a call first, and with text once the conversation carries a tool result. */
const callThenAnswer: Handler = (_req, res, recorded) => {
  const body = JSON.parse(recorded.body) as { messages: Array<{ role: string }> }
  if (body.messages.some(m => m.role === 'tool')) streamText(res, 'It is 3 degrees in Oslo.')
  else streamCall(res)
}

t.test('tools, tool_choice, parallel_tool_calls and tool turns are passed on; unsent sampling fields are not', async t => {
  const s = await relayApp(t, callThenAnswer)
  const messages = [
    { role: 'developer', content: 'Use tools.' },
    { role: 'user', content: 'Weather in Oslo?' },
    { role: 'assistant', content: null, tool_calls: [{ id: 'call_1', type: 'function', function: { name: 'get_weather', arguments: '{"city":"Oslo"}' } }] },
    { role: 'tool', tool_call_id: 'call_1', content: '{"temp":3}' },
  ]
  const res = await s.app.inject({ method: 'POST', url: CHAT, headers: s.auth, payload: { model: 'relay', messages, tools: [weatherTool], tool_choice: { type: 'function', function: { name: 'get_weather' } }, parallel_tool_calls: false, max_tokens: 50 } })
  t.equal(res.statusCode, 200, res.body)
  const body = sentBody(s.upstream)
  t.same(body.messages, [
    { role: 'system', content: 'Use tools.' },
    { role: 'user', content: 'Weather in Oslo?' },
    { role: 'assistant', content: null, tool_calls: [{ id: 'call_1', type: 'function', function: { name: 'get_weather', arguments: '{"city":"Oslo"}' } }] },
    { role: 'tool', tool_call_id: 'call_1', content: '{"temp":3}' },
  ])
  t.same(body.tools, [weatherTool])
  t.same(body.tool_choice, { type: 'function', function: { name: 'get_weather' } }, 'required and named choices are the upstream\'s to honour')
  t.equal(body.parallel_tool_calls, false)
  t.equal(body.max_tokens, 50)
  t.notOk('temperature' in body, 'no temperature the client did not send')
  t.notOk('top_p' in body, 'no top_p the client did not send')

  await s.app.inject({ method: 'POST', url: CHAT, headers: s.auth, payload: { model: 'relay', messages: messages.slice(0, 2), temperature: 0.3, top_p: 0.8 } })
  t.match(sentBody(s.upstream), { temperature: 0.3, top_p: 0.8 }, 'what the client sent is sent')
  t.notOk('tools' in sentBody(s.upstream))
})

t.test('penalties, logit_bias and min_p are passed on as given', async t => {
  const s = await relayApp(t, callThenAnswer)
  await s.app.inject({ method: 'POST', url: CHAT, headers: s.auth, payload: { model: 'relay', messages: [{ role: 'user', content: 'x' }], presence_penalty: 0.5, frequency_penalty: -1, logit_bias: { 42: -100 }, min_p: 0.1 } })
  t.match(sentBody(s.upstream), { presence_penalty: 0.5, frequency_penalty: -1, logit_bias: { 42: -100 }, min_p: 0.1 })
})

t.test('reasoning_effort is passed on; the upstream\'s reasoning_tokens come back in the reply and the stream\'s usage chunk', async t => {
  const s = await relayApp(t, (_req, res) => streamCall(res, { usage: { completion_tokens_details: { reasoning_tokens: 7 } } }))
  const res = await s.app.inject({ method: 'POST', url: CHAT, headers: s.auth, payload: { model: 'relay', messages: [{ role: 'user', content: 'x' }], reasoning_effort: 'low' } })
  t.equal(sentBody(s.upstream).reasoning_effort, 'low')
  t.same(res.json().usage.completion_tokens_details, { reasoning_tokens: 7 })
  const stream = await s.client.chat.completions.create({ model: 'relay', messages: [{ role: 'user', content: 'x' }], stream: true, stream_options: { include_usage: true } })
  let usage: OpenAI.CompletionUsage | null | undefined
  for await (const c of stream) if (c.usage) usage = c.usage
  t.same(usage?.completion_tokens_details, { reasoning_tokens: 7 })
})

t.test('OpenAI\'s own API gets max_completion_tokens instead of max_tokens', async t => {
  const body = (opts: { maxCompletionTokens?: boolean }) => upstreamBody({ messages: [{ role: 'user', content: 'x' }], maxTokens: 9, temperature: 1, topP: 1, topK: 0, stop: [] }, { upstreamModel: 'm', passTopK: false, ...opts })
  t.match(body({ maxCompletionTokens: true }), { max_completion_tokens: 9 })
  t.notOk('max_tokens' in body({ maxCompletionTokens: true }))
  t.match(body({}), { max_tokens: 9 })
  t.equal(sendsMaxCompletionTokens(new URL('https://api.openai.com/v1/chat/completions'), undefined), true, 'OpenAI\'s host by default')
  t.equal(sendsMaxCompletionTokens(new URL('http://127.0.0.1:8000/v1/chat/completions'), undefined), false, 'any other host by default')
  t.equal(sendsMaxCompletionTokens(new URL('https://api.openai.com/v1/chat/completions'), false), false, 'models.json decides when it says')
  const s = await relayApp(t, callThenAnswer, { maxCompletionTokens: true })
  await s.app.inject({ method: 'POST', url: CHAT, headers: s.auth, payload: { model: 'relay', messages: [{ role: 'user', content: 'x' }], max_tokens: 7 } })
  t.match(sentBody(s.upstream), { max_completion_tokens: 7 })
  t.notOk('max_tokens' in sentBody(s.upstream))
})

t.test('a streamed upstream call comes back: whole with content null, and as deltas the SDK assembles', async t => {
  const s = await relayApp(t, (_req, res) => streamCall(res))
  const res = await s.app.inject({ method: 'POST', url: CHAT, headers: s.auth, payload: { model: 'relay', messages: [{ role: 'user', content: 'Oslo?' }], tools: [weatherTool] } })
  t.equal(res.statusCode, 200)
  const choice = res.json().choices[0]
  t.same(choice.message, { role: 'assistant', content: null, tool_calls: [{ id: 'call_up1', type: 'function', function: { name: 'get_weather', arguments: '{"city":"Oslo"}' } }] })
  t.equal(choice.finish_reason, 'tool_calls')

  const stream = s.client.chat.completions.stream({ model: 'relay', messages: [{ role: 'user', content: 'Oslo?' }], tools: [weatherTool] })
  const deltas: unknown[] = []
  stream.on('chunk', c => { if (c.choices[0]?.delta.tool_calls) deltas.push(...c.choices[0].delta.tool_calls) })
  const final = await stream.finalChatCompletion()
  t.match(final.choices[0].message.tool_calls, choice.message.tool_calls, 'the stream assembles to exactly the whole reply\'s call')
  t.equal(final.choices[0].message.tool_calls?.length, 1)
  t.equal(final.choices[0].finish_reason, 'tool_calls')
  t.match(deltas[0], { index: 0, id: 'call_up1', type: 'function', function: { name: 'get_weather' } }, 'the name comes first')
  t.same(deltas.slice(1).map(d => (d as { function: { arguments: string } }).function.arguments), ['{"city":', '"Oslo"}'], 'then the argument pieces')
})

t.test('a whole JSON upstream reply with tool calls comes back', async t => {
  const s = await relayApp(t, (_req, res) => {
    res.writeHead(200, { 'content-type': 'application/json' })
    res.end(JSON.stringify({ id: 'x', object: 'chat.completion', created: 1, model: 'm', choices: [{ index: 0, message: { role: 'assistant', content: null, tool_calls: [{ id: 'c1', type: 'function', function: { name: 'get_weather', arguments: '{"city":"Bergen"}' } }, { id: 'c2', type: 'function', function: { name: 'get_weather', arguments: '{"city":"Oslo"}' } }] }, finish_reason: 'tool_calls' }], usage: { prompt_tokens: 3, completion_tokens: 4, total_tokens: 7 } }))
  })
  const res = await s.app.inject({ method: 'POST', url: CHAT, headers: s.auth, payload: { model: 'relay', messages: [{ role: 'user', content: 'x' }], tools: [weatherTool] } })
  t.same(res.json().choices[0].message.tool_calls.map((c: { id: string; function: { arguments: string } }) => [c.id, c.function.arguments]), [['c1', '{"city":"Bergen"}'], ['c2', '{"city":"Oslo"}']])
  t.equal(res.json().choices[0].finish_reason, 'tool_calls')
})

t.test('the openai SDK\'s runTools loop: a call, the result sent back as a tool message, the final answer', async t => {
  const s = await relayApp(t, callThenAnswer)
  const seen: unknown[] = []
  const runner = s.client.chat.completions.runTools({
    model: 'relay',
    messages: [{ role: 'user', content: 'Weather in Oslo?' }],
    tools: [{
      type: 'function',
      function: {
        name: 'get_weather',
        description: weatherTool.function.description,
        parameters: weatherTool.function.parameters,
        parse: JSON.parse,
        function: (args: { city: string }) => { seen.push(args); return { temp: 3 } },
      },
    }],
  })
  t.equal(await runner.finalContent(), 'It is 3 degrees in Oslo.')
  t.same(seen, [{ city: 'Oslo' }], 'the tool ran once with the parsed arguments')
  const second = sentBody(s.upstream, 1)
  t.match(second.messages.at(-2), { role: 'assistant', tool_calls: [{ id: 'call_up1', function: { name: 'get_weather', arguments: '{"city":"Oslo"}' } }] })
  t.same(second.messages.at(-1), { role: 'tool', tool_call_id: 'call_up1', content: '{"temp":3}' })
})

t.test('a hostile upstream: a tool call index far out of range is a clean 502', async t => {
  const s = await relayApp(t, (_req, res) => {
    sseHead(res)
    sseData(res, chunk({ tool_calls: [{ index: 1e9, id: 'c', function: { name: 'x', arguments: '{}' } }] }))
    sseData(res, chunk({}, 'tool_calls'))
    sseData(res, '[DONE]')
    res.end()
  })
  const res = await s.app.inject({ method: 'POST', url: CHAT, headers: s.auth, payload: { model: 'relay', messages: [{ role: 'user', content: 'x' }] } })
  t.equal(res.statusCode, 502)
  t.match(res.json().error, { message: /tool call/ })
})
