// POST /api/v1/messages on a scripted backend: the message and the event stream (whose deltas add
// up to the message), the key in x-api-key or Authorization, the translation into the chat
// conversation (system, mid-conversation system, tool_use/tool_result, thinking sent back adds
// nothing), Anthropic's error shape and statuses (529 on overload, Retry-After kept), bounds on
// hostile bodies, count_tokens, and the bodies Claude Code really sends.
import { readFileSync } from 'node:fs'
import t from 'tap'
import { ApiError } from '../../src/errors.ts'
import { buildTestApp } from '../helpers/app.ts'
import { ScriptedBackend } from '../helpers/scripted-backend.ts'
import { accumulateMessage, sseEvents } from '../helpers/sse-events.ts'

const URL = '/api/v1/messages'
const fixture = (name: string) => JSON.parse(readFileSync(new globalThis.URL(`../fixtures/${name}`, import.meta.url), 'utf8')) as Record<string, any>

const body = (extra: Record<string, unknown> = {}) => ({ model: 'scripted', max_tokens: 64, messages: [{ role: 'user', content: 'Tell me a story' }], ...extra })

t.test('a message, whole and streamed: the same blocks; the key in x-api-key or Authorization', async t => {
  const backend = new ScriptedBackend({ thinking: ['Let me', ' think'], words: ['Once', ' upon', ' a', ' time'] })
  const { app, key, auth } = await buildTestApp(t, { backends: [backend] })
  const res = await app.inject({ method: 'POST', url: `${URL}?beta=true`, headers: { 'x-api-key': key, 'anthropic-version': '2023-06-01', 'anthropic-beta': 'claude-code-20250219,some-future-beta-2030-01-01' }, payload: body() })
  t.equal(res.statusCode, 200, res.body)
  const message = res.json()
  t.match(message.id, /^msg_[A-Za-z0-9_-]{20,}$/)
  t.match(message, { type: 'message', role: 'assistant', model: 'scripted', stop_reason: 'end_turn', stop_sequence: null })
  t.equal(message.content.length, 2)
  t.match(message.content[0], { type: 'thinking', thinking: 'Let me think' })
  t.match(message.content[0].signature, /^chatd1\./, 'the thinking is sealed into its signature')
  t.same(message.content[1], { type: 'text', text: 'Once upon a time' })
  t.same(message.usage, { input_tokens: 4, output_tokens: 6, cache_read_input_tokens: 0, cache_creation_input_tokens: 0 })
  t.equal(backend.lastRequest?.maxTokens, 64, 'max_tokens reached the backend')

  const streamed = await app.inject({ method: 'POST', url: URL, headers: auth, payload: body({ stream: true }) })
  t.equal(streamed.statusCode, 200)
  t.match(streamed.headers['content-type'], /^text\/event-stream/)
  const events = sseEvents(streamed.body)
  t.same(events.map(e => e[0]), ['message_start', 'ping', 'content_block_start', 'content_block_delta', 'content_block_delta', 'content_block_delta', 'content_block_stop',
    'content_block_start', 'content_block_delta', 'content_block_delta', 'content_block_delta', 'content_block_delta', 'content_block_stop', 'message_delta', 'message_stop'])
  const whole = accumulateMessage(events)
  t.match(whole.content[0].signature, /^chatd1\./)
  const withoutSignatures = (m: any) => ({ ...m, id: '', content: m.content.map((b: any) => b.type === 'thinking' ? { ...b, signature: '' } : b) })
  t.same(withoutSignatures(whole), withoutSignatures(message), 'the deltas add up to the whole message')

  // display: omitted: the thinking block is there with its signature, its text empty, in both forms.
  const omitted = await app.inject({ method: 'POST', url: URL, headers: auth, payload: body({ thinking: { type: 'adaptive', display: 'omitted' } }) })
  t.match(omitted.json().content[0], { type: 'thinking', thinking: '' })
  t.match(omitted.json().content[0].signature, /^chatd1\./)
  const omittedStream = sseEvents((await app.inject({ method: 'POST', url: URL, headers: auth, payload: body({ stream: true, thinking: { type: 'adaptive', display: 'omitted' } }) })).body)
  t.notOk(omittedStream.some(([, d]) => d.delta?.type === 'thinking_delta'), 'no thinking text streams')
  t.ok(omittedStream.some(([, d]) => d.delta?.type === 'signature_delta'), 'the signature does')

  // The key is read from x-api-key only here: the chat door still wants Authorization.
  t.equal((await app.inject({ method: 'POST', url: '/api/v1/chat/completions', headers: { 'x-api-key': key }, payload: { model: 'scripted', messages: [{ role: 'user', content: 'x' }] } })).statusCode, 401)
  const wrong = await app.inject({ method: 'POST', url: URL, headers: { 'x-api-key': 'sk-chatd-wrong' }, payload: body() })
  t.equal(wrong.statusCode, 401)
  t.same(wrong.json(), { type: 'error', error: { type: 'authentication_error', message: 'Invalid API key.' } })
  const none = await app.inject({ method: 'POST', url: URL, payload: body() })
  t.equal(none.statusCode, 401)
  t.match(none.json().error.message, /x-api-key/, 'the refusal says where the key goes')
})

t.test('stop reasons and the chat request the backend gets', async t => {
  const backend = new ScriptedBackend()
  const { app, auth } = await buildTestApp(t, { backends: [backend] })
  const cut = await app.inject({ method: 'POST', url: URL, headers: auth, payload: body({ max_tokens: 2 }) })
  t.equal(cut.json().stop_reason, 'max_tokens')
  t.same(cut.json().content, [{ type: 'text', text: 'Once upon' }])
  const cutStream = accumulateMessage(sseEvents((await app.inject({ method: 'POST', url: URL, headers: auth, payload: body({ max_tokens: 2, stream: true }) })).body))
  t.equal(cutStream.stop_reason, 'max_tokens')

  const res = await app.inject({
    method: 'POST',
    url: URL,
    headers: auth,
    payload: {
      model: 'scripted',
      max_tokens: 100,
      system: [{ type: 'text', text: 'You are terse.', cache_control: { type: 'ephemeral' } }, { type: 'text', text: 'Answer in prose.' }],
      messages: [
        { role: 'user', content: [{ type: 'text', text: 'First' }, { type: 'text', text: 'question', cache_control: { type: 'ephemeral' } }] },
        { role: 'system', content: 'The environment: a test.' },
        { role: 'assistant', content: [{ type: 'thinking', thinking: 'secret thoughts', signature: 'forged' }, { type: 'text', text: 'Let me look.' }, { type: 'tool_use', id: 'toolu_1', name: 'lookup', input: { q: 'x' } }] },
        { role: 'user', content: [{ type: 'tool_result', tool_use_id: 'toolu_1', content: [{ type: 'text', text: 'found it' }] }, { type: 'text', text: 'Go on.' }] },
        { role: 'assistant', content: [{ type: 'tool_use', id: 'toolu_2', name: 'lookup', input: {} }] },
        { role: 'user', content: [{ type: 'tool_result', tool_use_id: 'toolu_2', content: 'no such file', is_error: true }] },
      ],
      tools: [
        { name: 'lookup', description: 'Looks things up.', input_schema: { type: 'object', properties: { q: { type: 'string' } } }, cache_control: { type: 'ephemeral' }, defer_loading: false },
        { type: 'web_search_20250305', name: 'web_search', max_uses: 3 },
        { type: 'bash_20250124', name: 'bash' },
      ],
      tool_choice: { type: 'auto', disable_parallel_tool_use: true },
      temperature: 0.5,
      top_k: 40,
      stop_sequences: ['THE END'],
      thinking: { type: 'enabled', budget_tokens: 2048 },
      metadata: { user_id: '{"device_id":"abc"}' },
      context_management: { edits: [{ type: 'clear_thinking_20251015', keep: 'all' }] },
      container: 'c_1',
      mcp_servers: [],
      service_tier: 'auto',
      some_future_field: { nested: [1, 2, 3] },
    },
  })
  t.equal(res.statusCode, 200, res.body)
  const sent = backend.lastRequest!
  t.same(sent.messages.map(m => [m.role, m.content]), [
    ['system', 'You are terse.\n\nAnswer in prose.'],
    ['user', 'First\n\nquestion'],
    ['system', 'The environment: a test.'],
    ['assistant', 'Let me look.'],
    ['tool', 'found it'],
    ['user', 'Go on.'],
    ['assistant', ''],
    ['tool', 'Error: no such file'],
  ], 'blocks become the chat conversation; thinking sent back adds nothing')
  t.same(sent.messages[3].toolCalls, [{ id: 'toolu_1', type: 'function', function: { name: 'lookup', arguments: '{"q":"x"}' } }])
  t.equal(sent.messages[4].toolCallId, 'toolu_1')
  t.same(sent.tools?.map(tool => tool.function.name), ['lookup'], 'server tools are not offered')
  t.same(sent.tools?.[0].function.parameters, { type: 'object', properties: { q: { type: 'string' } } })
  t.equal(sent.toolChoice, 'auto')
  t.equal(sent.parallelToolCalls, false)
  t.equal(sent.temperature, 0.5)
  t.equal(sent.topK, 40)
  t.same(sent.stop, ['THE END'])
  t.equal(sent.reasoningEffort, 'medium', 'a 2048-token thinking budget')
  t.same(sent.clientSampling, { temperature: true, topP: false, topK: true })

  for (const [thinking, effort, expected] of [
    [{ type: 'disabled' }, undefined, 'none'],
    [{ type: 'enabled', budget_tokens: 1024 }, undefined, 'low'],
    [{ type: 'enabled', budget_tokens: 30000 }, undefined, 'high'],
    [{ type: 'adaptive' }, 'medium', 'medium'],
    [undefined, 'max', 'high'],
    [{ type: 'adaptive' }, undefined, undefined],
  ] as const) {
    const r = await app.inject({ method: 'POST', url: URL, headers: auth, payload: body({ ...(thinking ? { thinking } : {}), ...(effort ? { output_config: { effort } } : {}) }) })
    t.equal(r.statusCode, 200)
    t.equal(backend.lastRequest?.reasoningEffort, expected, `thinking ${JSON.stringify(thinking)}, effort ${effort}`)
  }
})

t.test('Claude Code\'s own bodies are answered as sent', async t => {
  const backend = new ScriptedBackend({ words: ['hi'] })
  const { app, key, db } = await buildTestApp(t, { backends: [backend] })
  for (const name of ['claude-code-first-turn.json', 'claude-code-tool-result-turn.json']) {
    const captured = fixture(name)
    t.ok(JSON.stringify(captured).length > 40_000, `${name}: a real turn is large`)
    const res = await app.inject({ method: 'POST', url: `${URL}?beta=true`, headers: { 'x-api-key': key, 'anthropic-version': '2023-06-01', 'anthropic-beta': 'claude-code-20250219,interleaved-thinking-2025-05-14,context-management-2025-06-27' }, payload: { ...captured, model: 'scripted' } })
    t.equal(res.statusCode, 200, `${name}: ${res.body.slice(0, 300)}`)
    const events = sseEvents(res.body)
    t.equal(events.at(-1)?.[0], 'message_stop')
    t.equal(backend.lastRequest?.tools?.length, captured.tools.length, 'every client tool is offered')
    t.ok(backend.lastRequest?.messages.some(m => m.role === 'system' && m.content.includes('# Environment')), 'the mid-conversation system message is kept')
  }
  const last = backend.lastRequest!
  const tool = last.messages.find(m => m.role === 'tool')
  t.same([tool?.toolCallId, tool?.content], ['toolu_cap1', 'hi'], 'the Bash result answers its call')
  const rows = await db.selectFrom('usage_records').select(['request_id', 'status']).execute()
  t.equal(rows.length, 2)
  t.ok(rows.every(r => String(r.request_id).startsWith('msg_') && r.status === 'completed'), 'each turn wrote its usage row under the message id')
})

t.test('errors in Anthropic\'s shape, with the field at fault and Anthropic\'s statuses', async t => {
  let open!: () => void
  const gate = new Promise<void>(resolve => { open = resolve })
  const gated = new ScriptedBackend({ id: 'gated', firstGate: gate })
  const { app, auth } = await buildTestApp(t, {
    backends: [new ScriptedBackend(), gated,
      new ScriptedBackend({ id: 'refusing', refuse: new ApiError('context_length_exceeded', 'The conversation is 900 tokens; the model takes 512.', { param: 'messages' }) })],
    env: { QUEUE_SIZE: '1', BODY_LIMIT: '65536' },
  })
  const send = (payload: unknown, headers: Record<string, string> = auth) => app.inject({ method: 'POST', url: URL, headers, payload: payload as Record<string, unknown> })
  const expectError = async (payload: unknown, status: number, type: string, message: RegExp, what: string) => {
    const res = await send(payload)
    t.equal(res.statusCode, status, `${what}: ${res.body.slice(0, 300)}`)
    t.same(Object.keys(res.json()), ['type', 'error'], what)
    t.match(res.json(), { type: 'error', error: { type, message } }, what)
    return res
  }
  await expectError({ model: 'scripted', messages: [{ role: 'user', content: 'x' }] }, 400, 'invalid_request_error', /max_tokens/, 'max_tokens is required')
  await expectError(body({ model: 'nope' }), 404, 'not_found_error', /'nope' does not exist/, 'an unknown model')
  await expectError(body({ messages: [{ role: 'user', content: [{ type: 'text', text: 'see' }, { type: 'image', source: { type: 'base64', media_type: 'image/png', data: 'iVBOR' } }] }] }),
    400, 'invalid_request_error', /messages\[0\]\.content\[1\]: image blocks are not supported: the models on this server read text only/, 'an image')
  await expectError(body({ messages: [{ role: 'user', content: [{ type: 'tool_result', tool_use_id: 'toolu_x', content: 'r' }] }] }),
    400, 'invalid_request_error', /messages\[0\]\.content\[0\]\.tool_use_id 'toolu_x' answers no tool_use block/, 'a result without its call')
  await expectError(body({ messages: [{ role: 'user', content: [{ type: 'tool_use', id: 't', name: 'x', input: {} }] }] }),
    400, 'invalid_request_error', /messages\[0\]\.content\[0\]: tool_use blocks belong to assistant messages/, 'a call in a user turn')
  await expectError(body({ messages: [{ role: 'user', content: [{ type: 'hologram' }] }] }), 400, 'invalid_request_error', /messages\[0\]\.content\[0\]\.type: 'hologram' blocks are not supported/, 'an unknown block')
  await expectError(body({ temperature: 1.5 }), 400, 'invalid_request_error', /temperature/, 'temperature above Anthropic\'s 1')
  await expectError(body({ stop_sequences: ['a', 'b', 'c', 'd', 'e'] }), 400, 'invalid_request_error', /stop_sequences/, 'five stop sequences')
  await expectError(body({ tools: [{ name: 'bad name', input_schema: { type: 'object' } }] }), 400, 'invalid_request_error', /tools\[0\]\.name/, 'a tool name with a space')
  await expectError(body({ tools: [{ name: 'f' }] }), 400, 'invalid_request_error', /tools\[0\]\.input_schema must be a JSON Schema object/, 'a client tool without input_schema')
  await expectError(body({ tools: [{ name: 'f', input_schema: { type: 'object' } }], tool_choice: { type: 'tool', name: 'g' } }), 400, 'invalid_request_error', /tool_choice\.name: tool_choice names 'g'/, 'a forced tool that is not there')
  await expectError(body({ tools: [{ type: 'bash_20250124', name: 'bash' }], tool_choice: { type: 'tool', name: 'bash' } }), 400, 'invalid_request_error', /'bash', a server tool \(bash_20250124\) this server does not run/, 'a forced server tool')
  await expectError(body({ tools: [{ type: 'web_search_20250305', name: 'web_search' }], tool_choice: { type: 'any' } }), 400, 'invalid_request_error', /tool_choice any would force a server tool/, 'any with only server tools')
  await expectError(body({ tools: [{ name: 'f', input_schema: { type: 'object', properties: { a: nest(20) } } }] }), 400, 'invalid_request_error', /tools\[0\]\.input_schema/, 'a schema nested too deep, named as the Messages field')
  await expectError(body({ model: 'refusing' }), 400, 'invalid_request_error', /900 tokens/, 'a backend refusal')
  const tooBig = await app.inject({ method: 'POST', url: URL, headers: auth, payload: body({ messages: [{ role: 'user', content: 'x'.repeat(70_000) }] }) })
  t.equal(tooBig.statusCode, 413)
  t.same(tooBig.json().error.type, 'request_too_large')
  const broken = await app.inject({ method: 'POST', url: URL, headers: { ...auth, 'content-type': 'application/json' }, payload: '{"model": ' })
  t.equal(broken.statusCode, 400)
  t.equal(broken.json().type, 'error')

  // Overload: 529 overloaded_error with Retry-After, streamed or not.
  const first = send(body({ model: 'gated' }))
  await gated.whenRunning(1) // it holds the queue's one place
  for (const stream of [false, true]) {
    const busy = await send(body({ model: 'gated', stream }))
    t.equal(busy.statusCode, 529, `a full queue (stream ${stream})`)
    t.equal(busy.json().error.type, 'overloaded_error')
    t.ok(Number(busy.headers['retry-after']) > 0, 'Retry-After is kept')
  }
  open()
  t.equal((await first).statusCode, 200)
})

t.test('a failure after the stream started is an error event', async t => {
  const { app, auth } = await buildTestApp(t, {
    backends: [new ScriptedBackend({ failAfter: { deltas: 2, error: new ApiError('upstream_error', 'The upstream closed the connection.') } })],
  })
  const res = await app.inject({ method: 'POST', url: URL, headers: auth, payload: body({ stream: true }) })
  t.equal(res.statusCode, 200)
  const events = sseEvents(res.body)
  t.same(events.at(-1), ['error', { type: 'error', error: { type: 'api_error', message: 'The upstream closed the connection.' } }])
  t.notOk(events.some(([name]) => name === 'message_stop'))
})

t.test('a slow first event: message_start and a ping go out first, pings keep the stream alive, the reply follows', async t => {
  let open!: () => void
  const gate = new Promise<void>(resolve => { open = resolve })
  const { app, auth } = await buildTestApp(t, { backends: [new ScriptedBackend({ firstGate: gate })], env: { SSE_KEEPALIVE_MS: '20' } })
  await app.listen({ port: 0, host: '127.0.0.1' })
  const { port } = app.server.address() as { port: number }
  const res = await fetch(`http://127.0.0.1:${port}${URL}`, { method: 'POST', headers: { ...auth, 'content-type': 'application/json' }, body: JSON.stringify(body({ stream: true })) })
  // The model's first token waits on the gate; it opens only once three pings have arrived.
  const reader = res.body!.getReader()
  const decoder = new TextDecoder()
  let text = ''
  // (Three keep-alives of another kind end the wait too, so a regression fails instead of hanging.)
  while ((text.match(/^event: ping$/gm) ?? []).length < 3 && (text.match(/^: /gm) ?? []).length < 3) {
    const { value, done } = await reader.read()
    if (done) break
    text += decoder.decode(value, { stream: true })
  }
  open()
  for (let chunk = await reader.read(); !chunk.done; chunk = await reader.read()) text += decoder.decode(chunk.value, { stream: true })
  const events = sseEvents(text)
  t.same(events.slice(0, 2).map(e => e[0]), ['message_start', 'ping'])
  t.ok(events.filter(e => e[0] === 'ping').length >= 3, 'pings, Anthropic\'s keep-alive, while the first token was awaited')
  t.notMatch(text, /^:/m, 'no SSE comments: the keep-alive is the ping event')
  t.equal(accumulateMessage(events).content[0].text, 'Once upon a time')
})

/** A JSON Schema nested `depth` objects deep. */
function nest (depth: number): Record<string, unknown> {
  let schema: Record<string, unknown> = { type: 'string' }
  for (let i = 0; i < depth; i++) schema = { type: 'object', properties: { a: schema } }
  return schema
}

t.test('hostile bodies are bounded and refused naming the field', async t => {
  const backend = new ScriptedBackend()
  const { app, auth } = await buildTestApp(t, { backends: [backend], env: { MAX_CONTENT_PARTS: '8', MAX_MESSAGE_CHARS: '1000', MAX_MESSAGES: '10' } })
  const send = (payload: unknown) => app.inject({ method: 'POST', url: URL, headers: auth, payload: payload as Record<string, unknown> })
  const manyBlocks = await send(body({ messages: [{ role: 'user', content: Array.from({ length: 9 }, () => ({ type: 'text', text: 'a' })) }] }))
  t.equal(manyBlocks.statusCode, 400)
  t.match(manyBlocks.json().error.message, /messages\[0\]\.content: Too many content blocks: 9; at most 8/)
  const longText = await send(body({ messages: [{ role: 'user', content: [{ type: 'text', text: 'a'.repeat(600) }, { type: 'text', text: 'b'.repeat(600) }] }] }))
  t.match(longText.json().error.message, /messages\[0\]\.content: The message is 1200 characters long; at most 1000/)
  const longString = await send(body({ messages: [{ role: 'user', content: 'q' }, { role: 'assistant', content: 'a'.repeat(1001) }] }))
  t.match(longString.json().error.message, /messages\[1\]\.content/, 'the pipeline\'s own refusal names the Messages field')
  const longResult = await send(body({
    messages: [
      { role: 'user', content: 'q' },
      { role: 'assistant', content: [{ type: 'tool_use', id: 't1', name: 'f', input: {} }] },
      { role: 'user', content: [{ type: 'tool_result', tool_use_id: 't1', content: Array.from({ length: 9 }, () => ({ type: 'text', text: 'x' })) }] },
    ]
  }))
  t.match(longResult.json().error.message, /messages\[2\]\.content\[0\]\.content: Too many content blocks: 9/)
  const many = await send(body({ messages: Array.from({ length: 11 }, (_, i) => ({ role: i % 2 === 0 ? 'user' : 'assistant', content: 'x' })) }))
  t.equal(many.statusCode, 400)
  t.match(many.json().error.message, /at most 10 are accepted \(MAX_MESSAGES\)/)
  const hugeInput = await send(body({ messages: [{ role: 'user', content: 'q' }, { role: 'assistant', content: [{ type: 'tool_use', id: 't1', name: 'f', input: { a: 'x'.repeat(2000) } }] }] }))
  t.match(hugeInput.json().error.message, /messages\[1\]\.content/, 'a call\'s arguments count towards the message')
  const deep = await app.inject({ method: 'POST', url: URL, headers: { ...auth, 'content-type': 'application/json' }, payload: `{"model":"scripted","max_tokens":5,"messages":[{"role":"user","content":"x"}],"metadata":${'['.repeat(5000)}${']'.repeat(5000)}}` })
  t.equal(deep.statusCode, 400, 'a body nested deeper than JSON_MAX_DEPTH')
  t.equal(deep.json().type, 'error')
  t.equal(backend.lastRequest, undefined, 'nothing reached the backend')
  t.equal((await send(body())).statusCode, 200, 'the server still answers')
})

t.test('count_tokens: an estimate, the same checks, no usage row', async t => {
  const { app, auth, db } = await buildTestApp(t)
  const count = async (payload: Record<string, unknown>) => app.inject({ method: 'POST', url: `${URL}/count_tokens?beta=true`, headers: auth, payload })
  const small = await count({ model: 'scripted', messages: [{ role: 'user', content: 'Hello there' }] })
  t.equal(small.statusCode, 200, small.body)
  t.same(Object.keys(small.json()), ['input_tokens'])
  t.ok(small.json().input_tokens > 0)
  const bigger = await count({ model: 'scripted', system: 'x'.repeat(4000), messages: [{ role: 'user', content: 'Hello there' }], tools: [{ name: 'f', input_schema: { type: 'object' } }] })
  t.ok(bigger.json().input_tokens >= small.json().input_tokens + 1000, 'grows with the system prompt and tools')
  const captured = fixture('claude-code-first-turn.json')
  delete captured.max_tokens
  delete captured.stream
  const cc = await count({ ...captured, model: 'scripted' })
  t.equal(cc.statusCode, 200)
  t.ok(cc.json().input_tokens > 8000 && cc.json().input_tokens < 20000, `a Claude Code turn: ${cc.json().input_tokens}`)
  const unknown = await count({ model: 'nope', messages: [{ role: 'user', content: 'x' }] })
  t.equal(unknown.statusCode, 404)
  t.equal(unknown.json().error.type, 'not_found_error')
  const image = await count({ model: 'scripted', messages: [{ role: 'user', content: [{ type: 'image', source: {} }] }] })
  t.equal(image.statusCode, 400)
  t.equal((await db.selectFrom('usage_records').selectAll().execute()).length, 0, 'counting writes no usage row')
})

t.test('refusals are metered per key when the key comes in x-api-key', async t => {
  const { app, key } = await buildTestApp(t, { env: { REFUSED_PER_KEY_PER_MINUTE: '2', REFUSED_PER_ADDRESS_PER_MINUTE: '0' } })
  const headers = { 'x-api-key': key }
  for (let i = 0; i < 2; i++) t.equal((await app.inject({ method: 'POST', url: URL, headers, payload: body({ max_tokens: 0 }) })).statusCode, 400)
  const limited = await app.inject({ method: 'POST', url: URL, headers, payload: body() })
  t.equal(limited.statusCode, 429, 'the key is over its refusals')
  t.equal(limited.json().error.type, 'rate_limit_error')
  t.ok(Number(limited.headers['retry-after']) > 0)
})

t.test('the OpenAPI document lists both routes', async t => {
  const { app } = await buildTestApp(t)
  const res = await app.inject({ url: '/docs/json' })
  t.equal(res.statusCode, 200)
  const paths = Object.keys(res.json().paths)
  t.ok(paths.includes('/api/v1/messages') && paths.includes('/api/v1/messages/count_tokens'), paths.join(' '))
})

t.test('a path under /api/v1/messages no route serves answers in Anthropic\'s shape', async t => {
  const { app, auth } = await buildTestApp(t)
  for (const [method, url] of [['GET', '/api/v1/messages'], ['GET', '/api/v1/messages/batches'], ['PUT', '/api/v1/messages?beta=true']] as const) {
    const res = await app.inject({ method, url, headers: auth })
    t.equal(res.statusCode, 404, `${method} ${url}`)
    t.match(res.json(), { type: 'error', error: { type: 'not_found_error', message: /No route/ } })
  }
  const other = await app.inject({ url: '/api/v1/nothing', headers: auth })
  t.match(other.json(), { error: { code: 'not_found' } }, 'elsewhere: the OpenAI shape')
})
