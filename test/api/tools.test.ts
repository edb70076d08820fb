// Conversations with tools: assistant tool calls with content null, tool results, the developer
// role, and the tools field, checked and passed to the backend; their hostile forms refused with
// 400 naming the field. On the local engine (stories260k): the tools block reaches the prompt,
// "auto" and "none" answer, "required" and a named tool get a call written by construction (a
// model that cannot write one by itself: its arguments valid against the tool's schema, whole
// and streamed alike), hostile tool schemas get 400.
import t from 'tap'
import OpenAI from 'openai'
import type { GenerateEvent, GenerateRequest, ToolCallFormat } from '../../src/engine/backend.ts'
import { readToolCalls } from '../../src/engine/tools/prompting.ts'
import { TOOL_FORMATS } from '../../src/engine/tools/format.ts'
import { buildTestApp, chatBody } from '../helpers/app.ts'
import { refChain } from '../helpers/hostile-schemas.ts'
import { ScriptedBackend } from '../helpers/scripted-backend.ts'
import { startStoriesServer } from '../helpers/stories-server.ts'
import { perDevice } from '../helpers/test-device.ts'

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

/** A backend that prompts for tools as the local engine does (OnnxBackend's own readToolCalls, the json form here), with a scripted model. */
class PromptingBackend extends ScriptedBackend {
  toolCallFormat (): ToolCallFormat {
    return TOOL_FORMATS.json
  }

  generate (request: GenerateRequest, signal: AbortSignal): AsyncIterable<GenerateEvent> {
    return readToolCalls(super.generate(request, signal), TOOL_FORMATS.json, request)
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

  const none = await app.inject({ method: 'POST', url: URL, headers: auth, payload: chatBody({ tools: [weatherTool], tool_choice: 'none' }) })
  t.equal(none.json().choices[0].message.content, 'Checking. ' + call, 'none: nothing is parsed')
  t.notOk(backend.lastRequest?.messages.some(m => m.content.includes('# Tools')), 'none: no tools block')
})

// Two tools whose arguments a check by hand can validate (no JSON-schema validator is a dependency);
// strict: no property beyond those named. Small, as stories260k's context is 512 tokens.
const forecastTool = {
  type: 'function',
  function: {
    name: 'get_forecast',
    parameters: { type: 'object', properties: { days: { type: 'integer', minimum: 1, maximum: 7 }, unit: { enum: ['c', 'f'] } }, required: ['days', 'unit'] },
    strict: true,
  },
}
const cityTool = {
  type: 'function',
  function: { name: 'get_weather', parameters: { type: 'object', properties: { city: { type: 'string', maxLength: 12 } }, required: ['city'] }, strict: true },
}

/** The reasons `args` (a call's arguments text) is not valid against the tool's schema above; [] when it is. */
function schemaFaults (name: string, args: string): string[] {
  let value: unknown
  try {
    value = JSON.parse(args)
  } catch {
    return [`arguments are not JSON: ${args}`]
  }
  if (typeof value !== 'object' || value === null || Array.isArray(value)) return ['arguments are not an object']
  const v = value as Record<string, unknown>
  const faults: string[] = []
  const allowed = name === 'get_forecast' ? ['days', 'unit'] : ['city']
  for (const key of Object.keys(v)) if (!allowed.includes(key)) faults.push(`unknown property ${key}`)
  if (v.city !== undefined && (typeof v.city !== 'string' || [...v.city].length > 12)) faults.push('city is not a string of at most 12 characters')
  if (name === 'get_forecast') {
    if (!Number.isInteger(v.days) || (v.days as number) < 1 || (v.days as number) > 7) faults.push('days is not an integer in 1..7')
    if (v.unit !== 'c' && v.unit !== 'f') faults.push('unit is not one of the enum')
  } else if (v.city === undefined) {
    faults.push('city is missing')
  }
  return faults
}

t.test('the local engine (stories260k) writes a required or named call by construction, valid against the tool\'s schema', async t => {
  const KEY = `sk-chatd-${'toolCall'.repeat(4)}`
  const server = await startStoriesServer(t, { modelId: 'stories260k', key: KEY })
  const client = new OpenAI({ apiKey: KEY, baseURL: `${server.url}/api/v1`, maxRetries: 0 })
  const messages = [{ role: 'user' as const, content: 'Once upon a time' }]
  const tools = [cityTool, forecastTool] as OpenAI.ChatCompletionTool[]
  const choices: Array<[string, OpenAI.ChatCompletionToolChoiceOption]> = [
    ['required', 'required'],
    ['named get_forecast', { type: 'function', function: { name: 'get_forecast' } }],
    ['named get_weather', { type: 'function', function: { name: 'get_weather' } }],
  ]
  for (const [label, toolChoice] of choices) {
    // One seed each on a software renderer (the WebGPU twin in CI), which decodes ~25x slower.
    for (const seed of perDevice({ cpu: [1, 2, 3], webgpu: [1] })) {
      const request = { model: 'stories260k', messages, tools, tool_choice: toolChoice, temperature: 1, seed }
      const whole = await client.chat.completions.create(request)
      const choice = whole.choices[0]
      t.equal(choice.finish_reason, 'tool_calls', `${label}, seed ${seed}: finish_reason`)
      t.equal(choice.message.content, null, `${label}, seed ${seed}: no text`)
      t.equal(choice.message.tool_calls?.length, 1, `${label}, seed ${seed}: one call`)
      const call = choice.message.tool_calls?.[0] as OpenAI.ChatCompletionMessageFunctionToolCall
      t.match(call, { id: /^call_/, type: 'function' })
      if (typeof toolChoice === 'object') t.equal(call.function.name, (toolChoice as { function: { name: string } }).function.name, `${label}: the named tool`)
      else t.ok(['get_weather', 'get_forecast'].includes(call.function.name), `${label}: a declared tool (${call.function.name})`)
      t.same(schemaFaults(call.function.name, call.function.arguments), [], `${label}, seed ${seed}: ${call.function.arguments} is valid against ${call.function.name}'s schema`)

      const stream = client.chat.completions.stream(request)
      const pieces: OpenAI.ChatCompletionChunk.Choice.Delta.ToolCall[] = []
      stream.on('chunk', c => { if (c.choices[0]?.delta.tool_calls) pieces.push(...c.choices[0].delta.tool_calls) })
      const final = await stream.finalChatCompletion()
      const streamedCall = final.choices[0].message.tool_calls?.[0] as OpenAI.ChatCompletionMessageFunctionToolCall
      t.same({ name: streamedCall.function.name, arguments: streamedCall.function.arguments }, call.function, `${label}, seed ${seed}: streamed, the same call assembles`)
      t.equal(final.choices[0].finish_reason, 'tool_calls')
      t.match(pieces[0], { index: 0, id: /^call_/, function: { name: call.function.name } }, 'the name comes first')
      t.ok(pieces.filter(p => p.function?.arguments).length > 1, 'then the arguments in several pieces, as they are written')
    }
  }

  // Without the constraint this model writes prose: auto stays as it was.
  const auto = await client.chat.completions.create({ model: 'stories260k', messages, tools: [cityTool] as OpenAI.ChatCompletionTool[], max_tokens: 20, temperature: 0 })
  t.equal(auto.choices[0].message.tool_calls, undefined, 'auto: this model writes no call by itself')
})

t.test('hostile tool schemas with a required call get 400 naming the tool, and the server keeps serving', async t => {
  const KEY = `sk-chatd-${'toolHost'.repeat(4)}`
  const server = await startStoriesServer(t, { modelId: 'stories260k', key: KEY })
  const auth = { authorization: `Bearer ${KEY}` }
  const send = (patch: Record<string, unknown>) => server.app.inject({
    method: 'POST', url: URL, headers: auth, payload: { model: 'stories260k', messages: [{ role: 'user', content: 'Once upon a time' }], max_tokens: 150, ...patch },
  })
  const chain = { type: 'function', function: { name: 'chain', parameters: refChain(200), strict: true } }
  let res = await send({ tools: [weatherTool, chain], tool_choice: 'required' })
  t.equal(res.statusCode, 400, res.body)
  t.match(res.json().error, { code: 'invalid_parameter', param: 'tools[1].function.parameters', message: /^tools\[1\]\.function\.parameters: / })
  res = await send({ tools: [{ type: 'function', function: { name: 'nowhere', parameters: { $ref: '#/$defs/missing' } } }], tool_choice: { type: 'function', function: { name: 'nowhere' } } })
  t.equal(res.statusCode, 400, 'a $ref to nowhere: refused before admission')
  t.match(res.json().error, { code: 'invalid_parameter', param: 'tools[0].function.parameters' })
  res = await send({ tools: [weatherTool], tool_choice: 'required', response_format: { type: 'json_object' } })
  t.equal(res.statusCode, 400, 'a forced call and a JSON response_format together')
  t.match(res.json().error, { code: 'invalid_parameter', param: 'tool_choice' })

  res = await send({ tools: [cityTool], tool_choice: 'required', seed: 5 })
  t.equal(res.statusCode, 200, 'still serving')
  t.equal(res.json().choices[0].finish_reason, 'tool_calls')
  t.same(schemaFaults('get_weather', res.json().choices[0].message.tool_calls[0].function.arguments), [])
})
