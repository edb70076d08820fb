// Errors name the field the client sent, at every door: the pipeline, the backends and the
// limiter name fields in one neutral vocabulary (src/api/pipeline/fields.ts), and each door's
// table renames them once, for refusals before the reply and for failures during it alike.
import t from 'tap'
import { ApiError } from '../../src/errors.ts'
import { fieldNames, parseField } from '../../src/api/pipeline/fields.ts'
import { buildTestApp } from '../helpers/app.ts'
import { parseEvents } from '../helpers/responses-app.ts'
import { ScriptedBackend } from '../helpers/scripted-backend.ts'

const CHAT = '/api/v1/chat/completions'
const RESPONSES = '/api/v1/responses'
const MESSAGES = '/api/v1/messages'

t.test('a neutral field, taken apart and renamed by a table', async t => {
  t.same(parseField('messages[3].tool_calls[1].name'), { kind: 'message', index: 3, part: 'tool_calls', call: 1, callPart: 'name' })
  t.same(parseField('messages[0]'), { kind: 'message', index: 0 })
  t.same(parseField('tools[2].parameters'), { kind: 'tool', index: 2, part: 'parameters' })
  t.same(parseField('response_format.json_schema.name'), { kind: 'other', name: 'response_format', rest: '.json_schema.name' })
  const names = fieldNames({ renamed: { response_format: 'text.format', 'response_format.json_schema': 'text.format', max_tokens: 'max_output_tokens' } })
  t.equal(names('response_format.json_schema.name'), 'text.format.name', 'the longest prefix wins')
  t.equal(names('response_format'), 'text.format')
  t.equal(names('max_tokens'), 'max_output_tokens')
  t.equal(names('max_tokens_x'), 'max_tokens_x', 'a prefix matches whole names only')
  t.equal(names('temperature'), 'temperature', 'a field the table does not name keeps its name')
})

t.test('a backend refusal about the reply\'s cap names each door\'s cap, before the reply and with stream: true', async t => {
  const refuse = new ApiError('context_length_exceeded', 'This model\'s context length is 512 tokens; the prompt has 500 and the reply asks for up to 100 more.', { param: 'max_tokens' })
  const { app, auth } = await buildTestApp(t, { backends: [new ScriptedBackend({ refuse })] })
  for (const stream of [false, true]) {
    const chat = await app.inject({ method: 'POST', url: CHAT, headers: auth, payload: { model: 'scripted', messages: [{ role: 'user', content: 'x' }], max_completion_tokens: 100, stream } })
    t.match(chat.json().error, { code: 'context_length_exceeded', param: 'max_completion_tokens' }, `chat, the field the client used (stream ${stream})`)
    const plain = await app.inject({ method: 'POST', url: CHAT, headers: auth, payload: { model: 'scripted', messages: [{ role: 'user', content: 'x' }], max_tokens: 100, stream } })
    t.equal(plain.json().error.param, 'max_tokens')
    const responses = await app.inject({ method: 'POST', url: RESPONSES, headers: auth, payload: { model: 'scripted', input: 'x', max_output_tokens: 100, stream } })
    t.match(responses.json().error, { code: 'context_length_exceeded', param: 'max_output_tokens' }, `Responses (stream ${stream})`)
    const messages = await app.inject({ method: 'POST', url: MESSAGES, headers: auth, payload: { model: 'scripted', max_tokens: 100, messages: [{ role: 'user', content: 'x' }], stream } })
    t.equal(messages.statusCode, 400)
    t.match(messages.json().error.message, /^max_tokens: This model's context length/, `Messages: the field leads the message (stream ${stream})`)
  }
})

t.test('a failure in the middle of the reply names the door\'s field too', async t => {
  const error = new ApiError('invalid_parameter', 'The schema cannot be used.', { param: 'tools[0].parameters' })
  const { app, auth } = await buildTestApp(t, { backends: [new ScriptedBackend({ words: ['a', 'b', 'c'], failAfter: { deltas: 1, error } })] })
  const chat = await app.inject({ method: 'POST', url: CHAT, headers: auth, payload: { model: 'scripted', messages: [{ role: 'user', content: 'x' }], stream: true } })
  const frames = chat.body.split('\n\n').filter(f => f.startsWith('data: {')).map(f => JSON.parse(f.slice(6)))
  t.match(frames.at(-1), { error: { param: 'tools[0].function.parameters', message: 'The schema cannot be used.' } }, 'chat: the error frame')
  const tools = [{ type: 'web_search_20250305', name: 'web_search' }, { name: 'f', input_schema: { type: 'object' } }]
  const messages = await app.inject({ method: 'POST', url: MESSAGES, headers: auth, payload: { model: 'scripted', max_tokens: 10, messages: [{ role: 'user', content: 'x' }], tools, stream: true } })
  const event = messages.body.split('\n\n').filter(f => f.startsWith('event: error')).map(f => JSON.parse(f.split('\ndata: ')[1]))[0]
  t.match(event, { type: 'error', error: { message: 'tools[1].input_schema: The schema cannot be used.' } }, 'Messages: the error event names the Anthropic tool (a server tool before it)')
  const responses = parseEvents((await app.inject({ method: 'POST', url: RESPONSES, headers: auth, payload: { model: 'scripted', input: 'x', stream: true } })).body)
  t.match(responses.at(-1)?.data, { type: 'response.failed', response: { error: { message: 'The schema cannot be used.' } } })
})

t.test('a refusal whose message names fields names them as each door does', async t => {
  const { app, auth } = await buildTestApp(t)
  const f = (name: string) => ({ type: 'function', function: { name, parameters: { type: 'object' } } })
  const chat = await app.inject({ method: 'POST', url: CHAT, headers: auth, payload: { model: 'scripted', messages: [{ role: 'user', content: 'x' }], tools: [f('a'), f('a')] } })
  t.match(chat.json().error, { param: 'tools[1].function.name', message: 'tools[1].function.name: two tools are named \'a\'.' })
  const responses = await app.inject({ method: 'POST', url: RESPONSES, headers: auth, payload: { model: 'scripted', input: 'x', tools: [{ type: 'function', name: 'a' }, { type: 'file_search' }, { type: 'function', name: 'a' }] } })
  t.match(responses.json().error, { param: 'tools[2].name', message: 'tools[2].name: two tools are named \'a\'.' }, 'Responses: the tool entry it came from')
  const messages = await app.inject({ method: 'POST', url: MESSAGES, headers: auth, payload: { model: 'scripted', max_tokens: 10, messages: [{ role: 'user', content: 'x' }], tools: [{ name: 'a', input_schema: { type: 'object' } }, { type: 'bash_20250124', name: 'bash' }, { name: 'a', input_schema: { type: 'object' } }] } })
  t.same(messages.json().error, { type: 'invalid_request_error', message: 'tools[2].name: two tools are named \'a\'.' }, 'Messages: the Anthropic tool it came from')
})

t.test('the limiter names the door\'s cap in its message and its param', async t => {
  const tiers = JSON.stringify({ tiers: { free: {}, small: { max_tokens_per_request: 50 }, unlimited: {} } })
  const { app, auth } = await buildTestApp(t, { tier: 'small', tiers })
  const responses = await app.inject({ method: 'POST', url: RESPONSES, headers: auth, payload: { model: 'scripted', input: 'x', max_output_tokens: 51 } })
  t.match(responses.json().error, { param: 'max_output_tokens', message: /^max_output_tokens is 51; the small tier allows at most 50/ })
  const messages = await app.inject({ method: 'POST', url: MESSAGES, headers: auth, payload: { model: 'scripted', max_tokens: 51, messages: [{ role: 'user', content: 'x' }] } })
  t.match(messages.json().error.message, /^max_tokens is 51; the small tier allows at most 50/)
  const chat = await app.inject({ method: 'POST', url: CHAT, headers: auth, payload: { model: 'scripted', messages: [{ role: 'user', content: 'x' }], max_completion_tokens: 51 } })
  t.match(chat.json().error, { param: 'max_completion_tokens', message: /^max_completion_tokens is 51;/ })
})

t.test('a door\'s translation meets the bounds of the chat body, and the refusal names the door\'s field', async t => {
  const backend = new ScriptedBackend()
  const { app, auth } = await buildTestApp(t, { backends: [backend] })
  // 129 calls in one assistant turn: over TOOL_CALLS_MAX, which the chat body's schema holds to.
  const calls = Array.from({ length: 129 }, (_, i) => ({ type: 'function_call', call_id: `c${i}`, name: 'f', arguments: '{}' }))
  const responses = await app.inject({ method: 'POST', url: RESPONSES, headers: auth, payload: { model: 'scripted', input: [{ role: 'user', content: 'x' }, ...calls] } })
  t.equal(responses.statusCode, 400, responses.body)
  t.match(responses.json().error, { code: 'invalid_parameter', param: 'input[1]', message: /^Invalid value for 'input\[1\]': .*128/ }, 'the first item of the turn')
  const uses = Array.from({ length: 129 }, (_, i) => ({ type: 'tool_use', id: `toolu_${i}`, name: 'f', input: {} }))
  const messages = await app.inject({ method: 'POST', url: MESSAGES, headers: auth, payload: { model: 'scripted', max_tokens: 10, messages: [{ role: 'user', content: 'x' }, { role: 'assistant', content: uses }] } })
  t.equal(messages.statusCode, 400, messages.body)
  t.match(messages.json().error.message, /^Invalid value for 'messages\[1\]\.content': .*128/)
  t.equal(backend.lastRequest, undefined, 'nothing reached the backend')
  // At the bound, both are served.
  const fine = await app.inject({ method: 'POST', url: RESPONSES, headers: auth, payload: { model: 'scripted', input: [{ role: 'user', content: 'x' }, ...calls.slice(1), { type: 'function_call_output', call_id: 'c1', output: 'ok' }] } })
  t.equal(fine.statusCode, 200, fine.body)
})
