// Conversations with tools: assistant tool calls with content null, tool results, the developer
// role, and the tools field, checked and passed to the backend; their hostile forms refused with
// 400 naming the field. On the local engine (stories260k): the tools block reaches the prompt,
// "auto" and "none" answer, "required" and a named tool are refused (no call can be guaranteed).
import t from 'tap'
import type { GenerateEvent, GenerateRequest, ToolCallFormat } from '../../src/engine/backend.ts'
import { parseToolCalls } from '../../src/engine/tools/call-parser.ts'
import { TOOL_FORMATS } from '../../src/engine/tools/format.ts'
import { buildTestApp, chatBody } from '../helpers/app.ts'
import { ScriptedBackend } from '../helpers/scripted-backend.ts'
import { startStoriesServer } from '../helpers/stories-server.ts'

const URL = '/api/v1/chat/completions'
const weatherTool = { type: 'function', function: { name: 'get_weather', description: 'The weather in a city.', parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] } } }
const toolConversation = [
  { role: 'developer', content: 'Use tools.' },
  { role: 'user', content: 'Weather in Oslo?' },
  { role: 'assistant', content: null, tool_calls: [{ id: 'call_1', type: 'function', function: { name: 'get_weather', arguments: '{"city":"Oslo"}' } }] },
  { role: 'tool', tool_call_id: 'call_1', content: '{"temp":3}' },
]

t.test('a tool conversation reaches the backend: developer as system, calls and results kept, tools passed on', async t => {
  const backend = new ScriptedBackend()
  const { app, auth } = await buildTestApp(t, { backends: [backend] })
  const res = await app.inject({ method: 'POST', url: URL, headers: auth, payload: chatBody({ messages: toolConversation, tools: [weatherTool], tool_choice: 'required', parallel_tool_calls: false }) })
  t.equal(res.statusCode, 200, res.body)
  t.same(backend.lastRequest?.messages, [
    { role: 'system', content: 'Use tools.' },
    { role: 'user', content: 'Weather in Oslo?' },
    { role: 'assistant', content: '', toolCalls: [{ id: 'call_1', type: 'function', function: { name: 'get_weather', arguments: '{"city":"Oslo"}' } }] },
    { role: 'tool', content: '{"temp":3}', toolCallId: 'call_1' },
  ])
  t.same(backend.lastRequest?.tools, [weatherTool])
  t.equal(backend.lastRequest?.toolChoice, 'required', 'a backend that passes tools on gets the choice as sent')
  t.equal(backend.lastRequest?.parallelToolCalls, false)
})

t.test('a developer message follows the model\'s systemPrompt rule', async t => {
  const backend = new ScriptedBackend()
  const { app, auth } = await buildTestApp(t, { backends: [{ backend, systemPrompt: 'user' }] })
  const res = await app.inject({ method: 'POST', url: URL, headers: auth, payload: chatBody({ messages: [{ role: 'developer', content: 'Be brief.' }, { role: 'user', content: 'Hi' }] }) })
  t.equal(res.statusCode, 200)
  t.same(backend.lastRequest?.messages, [{ role: 'user', content: 'Be brief.\n\nHi' }])
})

const INVALID: Array<[string, Record<string, unknown>, string]> = [
  ['content null without tool_calls', { messages: [{ role: 'assistant', content: null }, { role: 'user', content: 'x' }] }, 'messages[0].content'],
  ['tool_calls on a user message', { messages: [{ role: 'user', content: 'x', tool_calls: toolConversation[2].tool_calls }] }, 'messages[0].tool_calls'],
  ['a tool message first', { messages: [{ role: 'tool', tool_call_id: 'a', content: 'x' }] }, 'messages[0].role'],
  ['a tool message without tool_call_id', { messages: [...toolConversation.slice(0, 3), { role: 'tool', content: 'x' }] }, 'messages[3].tool_call_id'],
  ['tool_call_id on a user message', { messages: [{ role: 'user', content: 'x', tool_call_id: 'a' }] }, 'messages[0].tool_call_id'],
  ['a tool call id too long', { messages: [{ role: 'user', content: 'x' }, { role: 'assistant', tool_calls: [{ id: 'i'.repeat(257), type: 'function', function: { name: 'f', arguments: '{}' } }] }] }, 'messages[1].tool_calls[0].id'],
  ['too many tool calls', { messages: [{ role: 'user', content: 'x' }, { role: 'assistant', tool_calls: Array.from({ length: 129 }, (_, i) => ({ id: `c${i}`, type: 'function', function: { name: 'f', arguments: '{}' } })) }] }, 'messages[1].tool_calls'],
  ['a tool name with spaces', { tools: [{ type: 'function', function: { name: 'rm -rf' } }] }, 'tools[0].function.name'],
  ['too many tools', { tools: Array.from({ length: 129 }, (_, i) => ({ type: 'function', function: { name: `t${i}` } })) }, 'tools'],
  ['two tools of one name', { tools: [weatherTool, weatherTool] }, 'tools[1].function.name'],
  ['a tool of another type', { tools: [{ type: 'retrieval', function: { name: 'f' } }] }, 'tools[0].type'],
  ['tool_choice another word', { tools: [weatherTool], tool_choice: 'always' }, 'tool_choice'],
  ['tool_choice naming an undeclared tool', { tools: [weatherTool], tool_choice: { type: 'function', function: { name: 'rm' } } }, 'tool_choice'],
  ['tool_choice required without tools', { tool_choice: 'required' }, 'tool_choice'],
  ['parallel_tool_calls a string', { parallel_tool_calls: 'yes' }, 'parallel_tool_calls'],
]

t.test('malformed tool turns and tools get 400 invalid_parameter naming the field', async t => {
  const { app, auth } = await buildTestApp(t)
  for (const [name, patch, param] of INVALID) {
    const res = await app.inject({ method: 'POST', url: URL, headers: auth, payload: chatBody(patch) })
    t.equal(res.statusCode, 400, `${name}: status`)
    t.equal(res.json().error?.code, 'invalid_parameter', `${name}: code`)
    t.equal(res.json().error?.param, param, `${name}: param`)
  }
})

t.test('hostile sizes: arguments over MAX_MESSAGE_CHARS, a schema nested too deep, tools too large', async t => {
  const { app, auth } = await buildTestApp(t, { env: { MAX_MESSAGE_CHARS: '1000' } })
  const send = (patch: Record<string, unknown>) => app.inject({ method: 'POST', url: URL, headers: auth, payload: chatBody(patch) })
  let res = await send({ messages: [{ role: 'user', content: 'x' }, { role: 'assistant', tool_calls: [{ id: 'a', type: 'function', function: { name: 'f', arguments: JSON.stringify({ a: 'x'.repeat(2000) }) } }] }, { role: 'tool', tool_call_id: 'a', content: 'ok' }] })
  t.equal(res.statusCode, 400)
  t.match(res.json().error, { code: 'invalid_parameter', param: 'messages[1].tool_calls', message: /MAX_MESSAGE_CHARS/ })
  let deep: Record<string, unknown> = { type: 'string' }
  for (let i = 0; i < 20; i++) deep = { type: 'object', properties: { a: deep } }
  res = await send({ tools: [{ type: 'function', function: { name: 'f', parameters: deep } }] })
  t.equal(res.statusCode, 400)
  t.match(res.json().error, { code: 'invalid_parameter', param: 'tools[0].function.parameters', message: /nested/ })
  res = await send({ tools: [{ type: 'function', function: { name: 'f', description: 'd'.repeat(800) } }, { type: 'function', function: { name: 'g', description: 'd'.repeat(800) } }] })
  t.equal(res.statusCode, 400)
  t.match(res.json().error, { code: 'invalid_parameter', param: 'tools', message: /MAX_MESSAGE_CHARS/ })
})

t.test('the local engine (stories260k)', async t => {
  const KEY = `sk-chatd-${'toolTest'.repeat(4)}`
  const server = await startStoriesServer(t, { modelId: 'stories260k', key: KEY })
  const auth = { authorization: `Bearer ${KEY}` }
  const send = (patch: Record<string, unknown>) => server.app.inject({
    method: 'POST', url: URL, headers: auth, payload: { model: 'stories260k', messages: [{ role: 'user', content: 'Once upon a time' }], max_tokens: 4, temperature: 0, ...patch },
  })

  for (const choice of ['required', { type: 'function', function: { name: 'get_weather' } }]) {
    const res = await send({ tools: [weatherTool], tool_choice: choice })
    t.equal(res.statusCode, 400, `${JSON.stringify(choice)}: refused, never answered with prose`)
    t.match(res.json().error, { code: 'invalid_parameter', param: 'tool_choice', message: /cannot yet guarantee a tool call/ })
  }

  const plain = await send({})
  const auto = await send({ tools: [weatherTool] })
  const none = await send({ tools: [weatherTool], tool_choice: 'none' })
  t.equal(auto.statusCode, 200, auto.body)
  t.equal(none.statusCode, 200)
  const tokens = (res: typeof plain) => res.json().usage.prompt_tokens as number
  t.ok(tokens(auto) > tokens(plain) + 50, `auto: the tools block is in the prompt (${tokens(auto)} > ${tokens(plain)} tokens)`)
  t.equal(tokens(none), tokens(plain), 'none: the tools are not offered')
  t.type(auto.json().choices[0].message.content, 'string', 'prose stays content')
  t.equal(auto.json().choices[0].message.tool_calls, undefined)

  const turn = await send({ messages: toolConversation })
  t.equal(turn.statusCode, 200, turn.body)
  const withoutResult = await send({ messages: toolConversation.slice(0, 3).concat([{ role: 'tool', tool_call_id: 'call_1', content: '{"temp":3, "wind": "strong from the north west"}' }]) })
  t.ok(tokens(withoutResult) > tokens(turn), 'the tool result is in the prompt')
})

/** A backend that prompts for tools the way the local engine does (OnnxBackend: the json form here), with a scripted model. */
class PromptingBackend extends ScriptedBackend {
  toolCallFormat (): ToolCallFormat {
    return TOOL_FORMATS.json
  }

  generate (request: GenerateRequest, signal: AbortSignal): AsyncIterable<GenerateEvent> {
    const events = super.generate(request, signal)
    if (!request.tools || request.toolChoice === 'none') return events
    return parseToolCalls(events, { format: TOOL_FORMATS.json, tools: request.tools, parallel: request.parallelToolCalls !== false })
  }
}

t.test('a backend that prompts for tools: the block reaches the system text, a written call comes back as tool_calls, streamed the same', async t => {
  const call = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n</tool_call>'
  const backend = new PromptingBackend({ words: ['Checking. ', ...call.match(/[\s\S]{1,5}/g)!] })
  const { app, auth } = await buildTestApp(t, { backends: [backend] })
  const payload = chatBody({ tools: [weatherTool] })
  const whole = await app.inject({ method: 'POST', url: URL, headers: auth, payload })
  t.equal(whole.statusCode, 200, whole.body)
  t.match(backend.lastRequest?.messages[0], { role: 'system', content: /^# Tools\n[\s\S]*"name":"get_weather"[\s\S]*<tool_call>/ }, 'the tools block is a system text')
  const message = whole.json().choices[0].message
  t.equal(message.content, 'Checking. ')
  t.match(message.tool_calls, [{ id: /^call_/, type: 'function', function: { name: 'get_weather', arguments: '{"city":"Oslo"}' } }])
  t.equal(whole.json().choices[0].finish_reason, 'tool_calls')

  const streamed = await app.inject({ method: 'POST', url: URL, headers: auth, payload: { ...payload, stream: true } })
  const chunks = streamed.body.split('\n\n').filter(f => f.startsWith('data: {')).map(f => JSON.parse(f.slice(6)))
  const pieces = chunks.flatMap(c => c.choices[0]?.delta?.tool_calls ?? [])
  t.match(pieces[0], { index: 0, id: /^call_/, type: 'function', function: { name: 'get_weather' } }, 'the name first')
  const assembled = { name: pieces.map(p => p.function?.name ?? '').join(''), arguments: pieces.map(p => p.function?.arguments ?? '').join('') }
  t.same(assembled, { name: message.tool_calls[0].function.name, arguments: message.tool_calls[0].function.arguments }, 'the pieces assemble to the whole reply\'s call')
  t.equal(chunks.map(c => c.choices[0]?.finish_reason).find(Boolean), 'tool_calls')

  const refused = await app.inject({ method: 'POST', url: URL, headers: auth, payload: chatBody({ tools: [weatherTool], tool_choice: 'required' }) })
  t.equal(refused.statusCode, 400)
  const none = await app.inject({ method: 'POST', url: URL, headers: auth, payload: chatBody({ tools: [weatherTool], tool_choice: 'none' }) })
  t.equal(none.json().choices[0].message.content, 'Checking. ' + call, 'none: nothing is parsed')
  t.notOk(backend.lastRequest?.messages.some(m => m.content.includes('# Tools')), 'none: no tools block')
})
