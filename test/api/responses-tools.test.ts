// The Responses door's tools and items on scripted backends: function calls out
// and their outputs back, namespaced functions (the call names its namespace,
// as OpenAI returns it), tool_choice forms, hosted tools ignored or refused,
// text.format as the chat response_format, reasoning sealed for the account
// and sent back, and the bodies the Codex CLI and the Agents SDK really send.

import { readFileSync } from 'node:fs'
import t from 'tap'
import type { GenerateEvent } from '../../src/engine/backend.ts'
import { ScriptedBackend } from '../helpers/scripted-backend.ts'
import { buildResponsesApp, parseEvents, ScriptBackend, usage } from '../helpers/responses-app.ts'

const URL = '/api/v1/responses'
const fixture = (name: string) => JSON.parse(readFileSync(new globalThis.URL(`../fixtures/responses/${name}.json`, import.meta.url), 'utf8')) as Record<string, unknown>

const weather = { type: 'function', name: 'get_weather', description: 'The weather in a city.', parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] }, strict: true }
const agents = {
  type: 'namespace',
  name: 'multi_agent_v1',
  description: 'Sub-agents.',
  tools: [
    { type: 'function', name: 'spawn_agent', description: 'Start one.', parameters: { type: 'object', properties: { task: { type: 'string' } } } },
    { type: 'custom', name: 'freeform' },
  ],
}

const callReply = (name: string, args: string, id = 'call_1'): GenerateEvent[] => [
  { type: 'delta', content: 'Let me check.' },
  { type: 'delta', toolCalls: [{ index: 0, id, name }] },
  { type: 'delta', toolCalls: [{ index: 0, arguments: args.slice(0, 5) }] },
  { type: 'delta', toolCalls: [{ index: 0, arguments: args.slice(5) }] },
  { type: 'finish', reason: 'tool_calls', usage: usage(20, 9) },
]
const done: GenerateEvent[] = [{ type: 'delta', content: 'It is 3 degrees.' }, { type: 'finish', reason: 'stop', usage: usage(30, 5) }]

t.test('a function call out, its output back: the item shapes, and the conversation the backend sees', async t => {
  const backend = new ScriptBackend([callReply('get_weather', '{"city":"Oslo"}'), done])
  const { app, auth } = await buildResponsesApp(t, { backends: [backend] })
  const input = [{ role: 'user', content: 'Weather in Oslo?' }]
  const first = await app.inject({ method: 'POST', url: URL, headers: auth, payload: { model: 'scripted', input, tools: [weather], tool_choice: 'auto', parallel_tool_calls: false } })
  t.equal(first.statusCode, 200, first.body)
  const out = first.json().output
  t.same(out.map((o: { type: string }) => o.type), ['message', 'function_call'])
  t.match(out[1], { type: 'function_call', status: 'completed', call_id: 'call_1', name: 'get_weather', arguments: '{"city":"Oslo"}' })
  t.match(out[1].id, /^fc_/)
  t.notOk('namespace' in out[1], 'a plain function call has no namespace')
  t.same(backend.requests[0].tools, [{ type: 'function', function: { name: 'get_weather', description: 'The weather in a city.', parameters: weather.parameters, strict: true } }])
  t.equal(backend.requests[0].toolChoice, 'auto')
  t.equal(backend.requests[0].parallelToolCalls, false)

  const second = await app.inject({ method: 'POST', url: URL, headers: auth, payload: { model: 'scripted', input: [...input, ...out, { type: 'function_call_output', call_id: 'call_1', output: '{"temp":3}' }], tools: [weather] } })
  t.equal(second.statusCode, 200, second.body)
  t.equal(second.json().output[0].content[0].text, 'It is 3 degrees.')
  t.same(backend.requests[1].messages, [
    { role: 'user', content: 'Weather in Oslo?' },
    { role: 'assistant', content: 'Let me check.', toolCalls: [{ id: 'call_1', type: 'function', function: { name: 'get_weather', arguments: '{"city":"Oslo"}' } }] },
    { role: 'tool', content: '{"temp":3}', toolCallId: 'call_1' },
  ], 'the call joins the assistant message before it; the output is a tool message')
})

t.test('streamed function call: added when its name is whole, arguments as deltas, done with the whole arguments', async t => {
  const backend = new ScriptBackend([callReply('get_weather', '{"city":"Oslo"}')])
  const { app, auth } = await buildResponsesApp(t, { backends: [backend] })
  const events = parseEvents((await app.inject({ method: 'POST', url: URL, headers: auth, payload: { model: 'scripted', input: 'Weather?', tools: [weather], stream: true } })).body)
  const call = events.filter(e => e.event !== 'response.completed' && JSON.stringify(e.data).includes('function_call'))
  t.same(call.map(e => e.event), ['response.output_item.added', 'response.function_call_arguments.delta', 'response.function_call_arguments.delta', 'response.function_call_arguments.done', 'response.output_item.done'])
  t.match(call[0].data.item, { type: 'function_call', name: 'get_weather', call_id: 'call_1', arguments: '', status: 'in_progress' })
  t.equal(call.slice(1, 3).map(e => e.data.delta).join(''), '{"city":"Oslo"}')
  t.match(call[3].data, { name: 'get_weather', arguments: '{"city":"Oslo"}' })
  t.match(call[4].data.item, { status: 'completed', arguments: '{"city":"Oslo"}' })
  t.equal(events.at(-1)!.event, 'response.completed')
})

t.test('a namespace: its functions offered as <namespace>__<name>, a call returned with its namespace, and sent back the same way', async t => {
  const backend = new ScriptBackend([callReply('multi_agent_v1__spawn_agent', '{"task":"tests"}'), done])
  const { app, auth } = await buildResponsesApp(t, { backends: [backend] })
  const res = await app.inject({ method: 'POST', url: URL, headers: auth, payload: { model: 'scripted', input: 'Spawn one', tools: [weather, agents] } })
  t.equal(res.statusCode, 200, res.body)
  t.same(backend.requests[0].tools?.map(tool => tool.function.name), ['get_weather', 'multi_agent_v1__spawn_agent'], 'custom tools inside are not offered')
  const call = res.json().output[1]
  t.match(call, { type: 'function_call', name: 'spawn_agent', namespace: 'multi_agent_v1', arguments: '{"task":"tests"}' })
  const back = await app.inject({ method: 'POST', url: URL, headers: auth, payload: { model: 'scripted', input: [{ role: 'user', content: 'Spawn one' }, call, { type: 'function_call_output', call_id: call.call_id, output: 'spawned' }], tools: [agents] } })
  t.equal(back.statusCode, 200, back.body)
  t.same(backend.requests[1].messages[1].toolCalls?.[0].function.name, 'multi_agent_v1__spawn_agent')
  const named = await app.inject({ method: 'POST', url: URL, headers: auth, payload: { model: 'scripted', input: 'x', tools: [agents], tool_choice: { type: 'function', name: 'spawn_agent', namespace: 'multi_agent_v1' } } })
  t.equal(named.statusCode, 200, named.body)
  t.same(backend.requests[2].toolChoice, { type: 'function', function: { name: 'multi_agent_v1__spawn_agent' } })
})

t.test('namespaces do not lift the cap on tools: their functions count, each', async t => {
  const backend = new ScriptedBackend()
  const { app, auth } = await buildResponsesApp(t, { backends: [backend] })
  const group = (g: number, n: number) => ({ type: 'namespace', name: `ns${g}`, description: 'd', tools: Array.from({ length: n }, (_, i) => ({ type: 'function', name: `f${i}`, parameters: { type: 'object', properties: {} } })) })
  const over = await app.inject({ method: 'POST', url: URL, headers: auth, payload: { model: 'scripted', input: 'x', tools: Array.from({ length: 5 }, (_, g) => group(g, 100)) } })
  t.equal(over.statusCode, 400)
  t.match(over.json().error, { code: 'invalid_parameter', param: 'tools', message: /Too many tools: 500 functions .*at most 128/ })
  t.equal(backend.lastRequest, undefined, 'nothing reached the backend')
  const within = await app.inject({ method: 'POST', url: URL, headers: auth, payload: { model: 'scripted', input: 'x', tools: [group(0, 100), group(1, 28)] } })
  t.equal(within.statusCode, 200, within.body)
  t.equal(backend.lastRequest?.tools?.length, 128)
})

t.test('tool_choice: the forms OpenAI has, as the backend takes them', async t => {
  const backend = new ScriptedBackend()
  const { app, auth } = await buildResponsesApp(t, { backends: [backend] })
  const ask = (extra: Record<string, unknown>) => app.inject({ method: 'POST', url: URL, headers: auth, payload: { model: 'scripted', input: 'x', tools: [weather, agents], ...extra } })
  t.equal((await ask({ tool_choice: 'required' })).statusCode, 200)
  t.equal(backend.lastRequest?.toolChoice, 'required')
  t.equal((await ask({ tool_choice: { type: 'function', name: 'get_weather' } })).statusCode, 200)
  t.same(backend.lastRequest?.toolChoice, { type: 'function', function: { name: 'get_weather' } })
  const allowed = await ask({ tool_choice: { type: 'allowed_tools', mode: 'required', tools: [{ type: 'function', name: 'get_weather' }] } })
  t.equal(allowed.statusCode, 200, allowed.body)
  t.equal(backend.lastRequest?.toolChoice, 'required')
  t.same(backend.lastRequest?.tools?.map(tool => tool.function.name), ['get_weather'], 'allowed_tools keeps only those')
  t.equal((await ask({ max_tool_calls: 1 })).statusCode, 200)
  t.equal(backend.lastRequest?.parallelToolCalls, undefined, 'max_tool_calls counts built-in tools only: function calls stay parallel')
  const missing = await ask({ tool_choice: { type: 'function', name: 'nope' } })
  t.equal(missing.statusCode, 400)
  t.equal(missing.json().error.param, 'tool_choice')
})

t.test('hosted tools: ignored unless forced, then 400 naming the tool; web_search without a provider is ignored', async t => {
  const backend = new ScriptedBackend()
  const { app, auth } = await buildResponsesApp(t, { backends: [backend] })
  const tools = [{ type: 'file_search', vector_store_ids: ['vs_1'] }, { type: 'code_interpreter', container: { type: 'auto' } }, { type: 'web_search', external_web_access: true }, { type: 'mcp', server_label: 'x', server_url: 'https://example.org' }, { type: 'image_generation' }, { type: 'computer_use_preview' }, { type: 'local_shell' }, { type: 'custom', name: 'apply_patch' }, { type: 'something_new_2027' }]
  const ignored = await app.inject({ method: 'POST', url: URL, headers: auth, payload: { model: 'scripted', input: 'x', tools: [...tools, weather] } })
  t.equal(ignored.statusCode, 200, ignored.body)
  t.same(backend.lastRequest?.tools?.map(tool => tool.function.name), ['get_weather'], 'only the function is offered')
  t.same(ignored.json().tools, [...tools, weather], 'the response echoes the tools as sent')
  for (const [choice, code] of [[{ type: 'file_search' }, 'invalid_parameter'], [{ type: 'code_interpreter' }, 'invalid_parameter'], [{ type: 'web_search' }, 'search_unavailable']] as const) {
    const res = await app.inject({ method: 'POST', url: URL, headers: auth, payload: { model: 'scripted', input: 'x', tools, tool_choice: choice } })
    t.equal(res.statusCode, 400, `forced ${choice.type}`)
    t.match(res.json().error, { code, param: 'tool_choice' })
    t.match(res.json().error.message, choice.type)
  }
})

t.test('text.format: json_schema and json_object become the response_format; the echo keeps the request\'s form', async t => {
  const backend = new ScriptedBackend({ words: ['{"a":1}'] })
  const { app, auth } = await buildResponsesApp(t, { backends: [backend] })
  const schema = { type: 'object', properties: { a: { type: 'integer' } }, required: ['a'], additionalProperties: false }
  const res = await app.inject({ method: 'POST', url: URL, headers: auth, payload: { model: 'scripted', input: 'x', text: { format: { type: 'json_schema', name: 'thing', schema, strict: true } } } })
  t.equal(res.statusCode, 200, res.body)
  t.same(backend.lastRequest?.responseFormat, { type: 'json_schema', json_schema: { name: 'thing', schema, strict: true } })
  t.same(res.json().text.format, { type: 'json_schema', name: 'thing', schema, strict: true })
  await app.inject({ method: 'POST', url: URL, headers: auth, payload: { model: 'scripted', input: 'x', text: { format: { type: 'json_object' } } } })
  t.same(backend.lastRequest?.responseFormat, { type: 'json_object' })
  await app.inject({ method: 'POST', url: URL, headers: auth, payload: { model: 'scripted', input: 'x', text: { format: { type: 'text' }, verbosity: 'low' } } })
  t.equal(backend.lastRequest?.responseFormat, undefined)
})

t.test('reasoning: sealed for the account with include; sent back (the own, another account\'s, forged, or not a string) it is accepted and adds nothing', async t => {
  const backend = new ScriptedBackend({ thinking: ['Secret', ' plan'], words: ['Done'] })
  const { app, auth, otherAuth } = await buildResponsesApp(t, { backends: [backend] })
  const res = await app.inject({ method: 'POST', url: URL, headers: auth, payload: { model: 'scripted', input: 'x', include: ['reasoning.encrypted_content'], reasoning: { effort: 'low', summary: 'auto' } } })
  t.equal(res.statusCode, 200, res.body)
  t.equal(backend.lastRequest?.reasoningEffort, 'low')
  const reasoning = res.json().output[0]
  t.match(reasoning, { type: 'reasoning', summary: [{ type: 'summary_text', text: 'Secret plan' }] })
  t.match(reasoning.encrypted_content, /^chatd1\./)
  t.notMatch(reasoning.encrypted_content, /Secret/, 'the sealed value does not show the text')
  const sendBack = (headers: Record<string, string>, encrypted: unknown) => app.inject({
    method: 'POST',
    url: URL,
    headers,
    payload: { model: 'scripted', input: [{ role: 'user', content: 'x' }, { ...reasoning, encrypted_content: encrypted, content: null }, { role: 'assistant', content: 'Done' }, { role: 'user', content: 'more' }] },
  })
  const own = await sendBack(auth, reasoning.encrypted_content)
  t.equal(own.statusCode, 200, own.body)
  t.same(backend.lastRequest?.messages.map(m => m.content), ['x', 'Done', 'more'], 'earlier thinking adds nothing to the prompt')
  for (const [label, headers, value] of [
    ['another account\'s', await otherAuth(), reasoning.encrypted_content],
    ['a forged', auth, 'chatd1.' + Buffer.from('not sealed by chatd at all, really').toString('base64url')],
    ['a foreign', auth, 'opaque-sealed-value'],
    ['an object', auth, { not: 'a string' }],
    ['a number', auth, 42],
  ] as const) {
    const res = await sendBack(headers, value)
    t.equal(res.statusCode, 200, `${label} value is ignored, not refused`)
    t.same(backend.lastRequest?.messages.map(m => m.content), ['x', 'Done', 'more'], `${label} value adds nothing`)
  }
  const streamed = parseEvents((await app.inject({ method: 'POST', url: URL, headers: auth, payload: { model: 'scripted', input: 'x', include: ['reasoning.encrypted_content'], stream: true } })).body)
  const doneItem = streamed.find(e => e.event === 'response.output_item.done')!.data.item as Record<string, unknown>
  t.match(doneItem.encrypted_content, /^chatd1\./, 'the streamed reasoning item carries it on output_item.done')
  t.same(res.json().reasoning, { effort: 'low', summary: 'auto' })
})

t.test('what the Codex CLI sends: every turn accepted, its instructions and items reach the backend, the web_search tool ignored without a provider', async t => {
  const backend = new ScriptBackend([callReply('exec_command', '{"cmd":"echo hello"}'), done])
  const { app, auth } = await buildResponsesApp(t, { backends: [backend] })
  const turn1 = fixture('codex-turn1')
  const res = await app.inject({ method: 'POST', url: URL, headers: { ...auth, 'content-type': 'application/json', accept: 'text/event-stream', originator: 'codex_exec', 'session-id': 'x' }, payload: turn1 })
  t.equal(res.statusCode, 200, res.body.slice(0, 500))
  const events = parseEvents(res.body)
  t.equal(events.at(-1)!.event, 'response.completed')
  const call = events.find(e => e.event === 'response.output_item.done' && (e.data.item as { type: string }).type === 'function_call')!.data.item as Record<string, unknown>
  t.match(call, { name: 'exec_command', arguments: '{"cmd":"echo hello"}', status: 'completed' })
  const seen = backend.requests[0]
  t.same(seen.messages.map(m => m.role), ['system', 'system', 'user', 'user'], 'the developer messages lead as system text')
  t.equal(seen.tools?.length, 12, 'eight functions, five namespaced ones, and no web_search')
  t.ok(seen.tools?.some(tool => tool.function.name === 'multi_agent_v1__spawn_agent'))
  for (const name of ['codex-turn2', 'codex-turn2-with-reasoning']) {
    const turn = await app.inject({ method: 'POST', url: URL, headers: auth, payload: fixture(name) })
    t.equal(turn.statusCode, 200, `${name}: ${turn.body.slice(0, 300)}`)
    const last = backend.requests.at(-1)!.messages.slice(-2)
    t.match(last, [{ role: 'assistant', toolCalls: [{ id: 'call_cap1', function: { name: 'exec_command', arguments: '{"cmd":"echo hello"}' } }] }, { role: 'tool', toolCallId: 'call_cap1' }])
    t.match(last[1].content, /hello\n$/)
  }
})

t.test('what the Agents SDK sends: accepted, streamed and not', async t => {
  const backend = new ScriptedBackend()
  const { app, auth } = await buildResponsesApp(t, { backends: [backend] })
  for (const name of ['agents-turn1', 'agents-turn2', 'agents-stream-turn1', 'agents-stream-turn2']) {
    const res = await app.inject({ method: 'POST', url: URL, headers: { ...auth, accept: 'application/json' }, payload: { ...fixture(name), model: 'scripted' } })
    t.equal(res.statusCode, 200, `${name}: ${res.body.slice(0, 300)}`)
    if (name.includes('stream')) t.equal(parseEvents(res.body).at(-1)!.event, 'response.completed')
    else t.equal(res.json().status, 'completed')
  }
  t.same(backend.lastRequest?.messages.map(m => m.role), ['system', 'user', 'assistant', 'tool'])
})
