// POST /api/v1/responses on scripted backends: the response object and its
// stream (whose deltas add up to it), input items and tools as the backend
// receives them, function calls there and back (namespaced too), text.format,
// reasoning sealed and sent back, stored responses chained by
// previous_response_id, the usage row under the response's id, and hostile or
// unsupported bodies refused with 400 naming the field.

import t from 'tap'
import type { GenerateEvent } from '../../src/engine/backend.ts'
import { ApiError } from '../../src/errors.ts'
import { ScriptedBackend } from '../helpers/scripted-backend.ts'
import { buildResponsesApp, MemoryResponseStore, parseEvents, ScriptBackend, usage } from '../helpers/responses-app.ts'

const URL = '/api/v1/responses'

const textReply = (...words: string[]): GenerateEvent[] => [
  ...words.map(content => ({ type: 'delta' as const, content })),
  { type: 'finish', reason: 'stop', usage: usage(7, words.length) },
]

t.test('a string input: one completed response with a message item, usage in Responses terms, the usage row under its id', async t => {
  const backend = new ScriptBackend([textReply('Once', ' upon', ' a', ' time')])
  const { app, auth, db } = await buildResponsesApp(t, { backends: [backend] })
  const res = await app.inject({ method: 'POST', url: URL, headers: auth, payload: { model: 'scripted', input: 'Tell me a story', instructions: 'Be brief.', metadata: { a: 'b' } } })
  t.equal(res.statusCode, 200, res.body)
  const body = res.json()
  t.match(body.id, /^resp_[0-9a-f]{36}$/)
  t.equal(body.object, 'response')
  t.equal(body.status, 'completed')
  t.equal(body.model, 'scripted')
  t.equal(body.instructions, 'Be brief.')
  t.same(body.metadata, { a: 'b' })
  t.equal(body.incomplete_details, null)
  t.equal(body.output.length, 1)
  t.match(body.output[0], { type: 'message', role: 'assistant', status: 'completed', content: [{ type: 'output_text', text: 'Once upon a time', annotations: [] }] })
  t.match(body.output[0].id, /^msg_/)
  t.same(body.usage, { input_tokens: 7, input_tokens_details: { cached_tokens: 0 }, output_tokens: 4, output_tokens_details: { reasoning_tokens: 0 }, total_tokens: 11 })
  t.same(backend.requests[0].messages, [{ role: 'system', content: 'Be brief.' }, { role: 'user', content: 'Tell me a story' }])
  const rows = await db.selectFrom('usage_records').selectAll().execute()
  t.equal(rows.length, 1)
  t.equal(rows[0].request_id, body.id, 'the usage row carries the response id')
  t.equal(rows[0].status, 'completed')
  t.equal(rows[0].prompt_tokens, 7)
})

t.test('the stream: typed events numbered from 0, whose deltas add up to the JSON response', async t => {
  const script: GenerateEvent[] = [
    { type: 'delta', reasoning: 'Let me ' },
    { type: 'delta', reasoning: 'think.' },
    { type: 'delta', content: 'Hello' },
    { type: 'delta', content: ' there' },
    { type: 'finish', reason: 'stop', usage: usage(5, 4, { reasoning: 2 }) },
  ]
  const backend = new ScriptBackend([script])
  const { app, auth } = await buildResponsesApp(t, { backends: [backend] })
  const payload = { model: 'scripted', input: [{ role: 'user', content: [{ type: 'input_text', text: 'Hi' }] }], reasoning: { summary: 'auto' } }
  const json = (await app.inject({ method: 'POST', url: URL, headers: auth, payload })).json()
  const res = await app.inject({ method: 'POST', url: URL, headers: auth, payload: { ...payload, stream: true } })
  t.equal(res.statusCode, 200)
  t.match(res.headers['content-type'], /text\/event-stream/)
  const events = parseEvents(res.body)
  t.same(events.map(e => e.data.sequence_number), events.map((_, i) => i), 'sequence_number counts from 0')
  t.ok(events.every(e => e.event === e.data.type), 'each event is named by its type')
  t.same(events.map(e => e.event), [
    'response.created', 'response.in_progress',
    'response.output_item.added', 'response.reasoning_summary_part.added',
    'response.reasoning_summary_text.delta', 'response.reasoning_summary_text.delta',
    'response.reasoning_summary_text.done', 'response.reasoning_summary_part.done', 'response.output_item.done',
    'response.output_item.added', 'response.content_part.added',
    'response.output_text.delta', 'response.output_text.delta',
    'response.output_text.done', 'response.content_part.done', 'response.output_item.done',
    'response.completed',
  ])
  t.equal(events[0].data.response && (events[0].data.response as { status: string }).status, 'in_progress')
  const completed = events.at(-1)!.data.response as Record<string, unknown> & { output: Array<Record<string, unknown>> }
  const thinking = events.filter(e => e.event === 'response.reasoning_summary_text.delta').map(e => e.data.delta).join('')
  const text = events.filter(e => e.event === 'response.output_text.delta').map(e => e.data.delta).join('')
  t.equal(thinking, 'Let me think.')
  t.equal(text, 'Hello there')
  t.same(json.output.map((o: { type: string }) => o.type), ['reasoning', 'message'])
  t.equal(json.output[0].summary[0].text, thinking, 'the reasoning summary is the thinking, streamed or not')
  t.equal(json.output[1].content[0].text, text)
  t.same(completed.usage, json.usage)
  t.same(completed.output.map(o => ({ ...o, id: '' })), json.output.map((o: Record<string, unknown>) => ({ ...o, id: '' })), 'the completed event carries the same output as the JSON response')
  t.equal(json.output[0].encrypted_content, undefined, 'no encrypted_content unless include asks for it')
  t.equal(json.usage.output_tokens_details.reasoning_tokens, 2)
})

t.test('max_output_tokens: a reply cut short is incomplete, streamed or not', async t => {
  const backend = new ScriptedBackend()
  const { app, auth } = await buildResponsesApp(t, { backends: [backend] })
  const res = await app.inject({ method: 'POST', url: URL, headers: auth, payload: { model: 'scripted', input: 'Hi', max_output_tokens: 2 } })
  const body = res.json()
  t.equal(backend.lastRequest?.maxTokens, 2)
  t.equal(body.status, 'incomplete')
  t.same(body.incomplete_details, { reason: 'max_output_tokens' })
  t.equal(body.output[0].status, 'incomplete')
  t.equal(body.output[0].content[0].text, 'Once upon')
  const events = parseEvents((await app.inject({ method: 'POST', url: URL, headers: auth, payload: { model: 'scripted', input: 'Hi', max_output_tokens: 2, stream: true } })).body)
  t.equal(events.at(-1)!.event, 'response.incomplete')
})

t.test('stored responses: saved with this turn\'s items, chained by previous_response_id (calls included), per account, store:false keeps nothing', async t => {
  const backend = new ScriptBackend([
    [{ type: 'delta', toolCalls: [{ index: 0, id: 'call_7', name: 'lookup', arguments: '{"q":"otters"}' }] }, { type: 'finish', reason: 'tool_calls', usage: usage(10, 5) }],
    textReply('Otters', ' swim.'),
    textReply('Yes.'),
  ])
  const { app, auth, store, otherAuth } = await buildResponsesApp(t, { backends: [backend] })
  const tools = [{ type: 'function', name: 'lookup', parameters: { type: 'object', properties: { q: { type: 'string' } } } }]
  const first = (await app.inject({ method: 'POST', url: URL, headers: auth, payload: { model: 'scripted', instructions: 'Use tools.', input: 'About otters?', tools } })).json()
  const saved = store.records.get(first.id)!
  t.ok(saved, 'saved under its id')
  t.equal(saved.previousResponseId, null)
  t.same(saved.response, first, 'the response as returned')
  t.match(saved.input, [{ type: 'message', role: 'user', content: [{ type: 'input_text', text: 'About otters?' }] }])
  t.match(saved.input[0].id, /^msg_/, 'each input item gets an id')
  const call = first.output.find((o: { type: string }) => o.type === 'function_call')

  const second = await app.inject({ method: 'POST', url: URL, headers: auth, payload: { model: 'scripted', previous_response_id: first.id, input: [{ type: 'function_call_output', call_id: call.call_id, output: 'they swim' }], tools } })
  t.equal(second.statusCode, 200, second.body)
  t.equal(second.json().previous_response_id, first.id)
  t.same(backend.requests[1].messages, [
    { role: 'user', content: 'About otters?' },
    { role: 'assistant', content: '', toolCalls: [{ id: 'call_7', type: 'function', function: { name: 'lookup', arguments: '{"q":"otters"}' } }] },
    { role: 'tool', content: 'they swim', toolCallId: 'call_7' },
  ], 'the chain, calls and outputs included, before this turn; instructions are not carried over')
  const third = await app.inject({ method: 'POST', url: URL, headers: auth, payload: { model: 'scripted', previous_response_id: second.json().id, input: 'Sure?', store: false } })
  t.equal(third.statusCode, 200)
  t.same(backend.requests[2].messages.map(m => m.content), ['About otters?', '', 'they swim', 'Otters swim.', 'Sure?'])
  t.equal(third.json().store, false)
  t.notOk(store.records.has(third.json().id), 'store: false keeps nothing')

  for (const [label, headers, id] of [['unknown', auth, 'resp_nope'], ['another account\'s', await otherAuth(), first.id]] as const) {
    const res = await app.inject({ method: 'POST', url: URL, headers, payload: { model: 'scripted', previous_response_id: id, input: 'x' } })
    t.equal(res.statusCode, 404, label)
    t.match(res.json().error, { code: 'not_found', param: 'previous_response_id' })
  }
})

t.test('errors name the Responses field: items, their parts, tools, and what the pipeline refuses', async t => {
  const backend = new ScriptedBackend()
  const { app, auth, db } = await buildResponsesApp(t, { backends: [backend], env: { MAX_MESSAGE_CHARS: '100' } })
  const cases: Array<[string, Record<string, unknown>, string, string?]> = [
    ['no input', {}, 'input'],
    ['an image part', { input: [{ role: 'user', content: [{ type: 'input_text', text: 'see' }, { type: 'input_image', image_url: 'data:x' }] }] }, 'input[0].content[1]'],
    ['a file in a function output', { input: [{ role: 'user', content: 'x' }, { type: 'function_call', call_id: 'c', name: 'f', arguments: '{}' }, { type: 'function_call_output', call_id: 'c', output: [{ type: 'input_file', file_id: 'f' }] }] }, 'input[2].output[0]'],
    ['a function call without call_id', { input: [{ role: 'user', content: 'x' }, { type: 'function_call', name: 'f', arguments: '{}' }] }, 'input[1].call_id'],
    ['a function name with spaces', { input: [{ role: 'user', content: 'x' }, { type: 'function_call', call_id: 'c', name: 'rm -rf', arguments: '{}' }] }, 'input[1].name'],
    ['an unknown role', { input: [{ role: 'robot', content: 'x' }] }, 'input[0].role'],
    ['an unknown item type', { input: [{ type: 'local_shell_call', call_id: 'c' }] }, 'input[0].type'],
    ['an item reference', { input: [{ type: 'item_reference', id: 'msg_1' }] }, 'input[0].type'],
    ['an item that is not an object', { input: ['hello'] }, 'input[0]'],
    ['an output before its call', { input: [{ type: 'function_call_output', call_id: 'c', output: 'x' }] }, 'input[0]'],
    ['a message over MAX_MESSAGE_CHARS', { input: [{ role: 'user', content: 'short' }, { role: 'user', content: 'x'.repeat(101) }] }, 'input[1].content'],
    ['call arguments over MAX_MESSAGE_CHARS', { input: [{ role: 'user', content: 'x' }, { type: 'function_call', call_id: 'c', name: 'f', arguments: `"${'x'.repeat(120)}"` }] }, 'input[1]'],
    ['instructions over MAX_MESSAGE_CHARS', { instructions: 'x'.repeat(101), input: 'hi' }, 'instructions'],
    ['a tool with a bad name', { input: 'x', tools: [{ type: 'function', name: 'a b' }] }, 'tools[0].name'],
    ['a namespace function with a bad schema type', { input: 'x', tools: [{ type: 'namespace', name: 'ns', tools: [{ type: 'function', name: 'f', parameters: 'nope' }] }] }, 'tools[0].tools[0].parameters'],
    ['two tools of one name', { input: 'x', tools: [{ type: 'function', name: 'f' }, { type: 'function', name: 'f' }] }, 'tools[1].name'],
    ['a schema nested too deep', { input: 'x', tools: [{ type: 'function', name: 'f', parameters: nested(20) }] }, 'tools[0].parameters'],
    ['a bad text.format', { input: 'x', text: { format: { type: 'xml' } } }, 'text.format.type'],
    ['temperature out of range', { input: 'x', temperature: 3 }, 'temperature'],
    ['a bad reasoning effort', { input: 'x', reasoning: { effort: 'extreme' } }, 'reasoning.effort'],
    ['background mode', { input: 'x', background: true }, 'background'],
    ['a conversation object', { input: 'x', conversation: 'conv_1' }, 'conversation'],
    ['metadata with 17 pairs', { input: 'x', metadata: Object.fromEntries(Array.from({ length: 17 }, (_, i) => [`k${i}`, 'v'])) }, 'metadata'],
    ['a metadata key of 65 characters', { input: 'x', metadata: { ['k'.repeat(65)]: 'v' } }, 'metadata'],
    ['a metadata value of 513 characters', { input: 'x', metadata: { k: 'v'.repeat(513) } }, 'metadata.k'],
    ['an unknown model', { input: 'x', model: 'nope' }, 'model', 'model_not_found'],
  ]
  for (const [label, extra, param, code] of cases) {
    const res = await app.inject({ method: 'POST', url: URL, headers: auth, payload: { model: 'scripted', ...extra } })
    t.equal(res.statusCode, code === 'model_not_found' ? 404 : 400, `${label}: ${res.body}`)
    t.equal(res.json().error.param, param, label)
    t.equal(res.json().error.code, code ?? 'invalid_parameter', label)
  }
  t.equal(backend.lastRequest, undefined, 'nothing reached the backend')
  t.equal((await db.selectFrom('usage_records').selectAll().execute()).length, 0, 'and no refusal before admission wrote a usage row')
})

function nested (depth: number): Record<string, unknown> {
  let schema: Record<string, unknown> = { type: 'string' }
  for (let i = 0; i < depth; i++) schema = { type: 'object', properties: { a: schema } }
  return schema
}

t.test('hostile bodies are bounded: item counts, nesting, unknown fields, and the process keeps serving', async t => {
  const backend = new ScriptedBackend()
  const { app, auth } = await buildResponsesApp(t, { backends: [backend] })
  const ask = (payload: unknown) => app.inject({ method: 'POST', url: URL, headers: auth, payload: payload as Record<string, unknown> })
  const many = await ask({ model: 'scripted', input: Array.from({ length: 10_000 }, () => ({ role: 'user', content: 'x' })) })
  t.equal(many.statusCode, 400)
  t.equal(many.json().error.param, 'input', '10,000 items: over the item limit')
  const messages = await ask({ model: 'scripted', input: Array.from({ length: 2000 }, () => ({ role: 'user', content: 'x' })) })
  t.equal(messages.statusCode, 400)
  t.match(messages.json().error, { param: 'input', message: /MAX_MESSAGES/ })
  const reasoning = await ask({ model: 'scripted', input: [...Array.from({ length: 4000 }, (_, i) => ({ type: 'reasoning', id: `rs_${i}`, summary: [], encrypted_content: 'chatd1.' + 'A'.repeat(100) })), { role: 'user', content: 'x' }] })
  t.equal(reasoning.statusCode, 200, '4,000 reasoning items sent back (none ours) are ignored')
  let deep: unknown = 'x'
  for (let i = 0; i < 1000; i++) deep = { a: deep }
  const deepRes = await app.inject({ method: 'POST', url: URL, headers: { ...auth, 'content-type': 'application/json' }, payload: JSON.stringify({ model: 'scripted', input: 'x', client_metadata: deep }) })
  t.equal(deepRes.statusCode, 400)
  t.equal(deepRes.json().error.code, 'invalid_json', 'nesting is refused before parsing')
  const fields = await ask({ model: 'scripted', input: 'x', ...Object.fromEntries(Array.from({ length: 200 }, (_, i) => [`x_${i}`, i])) })
  t.equal(fields.statusCode, 400, 'more than 128 top-level fields')
  t.match(fields.json().error, { code: 'invalid_parameter', message: /too many fields: at most 128 are accepted/ }, 'the message names the bound')
  const unknown = await ask({ model: 'scripted', input: 'x', future_field: { anything: [1, 2, 3] }, prompt_cache_key: 'thread-1', client_metadata: { a: 'b' }, service_tier: 'flex', truncation: 'auto', include: ['message.output_text.logprobs', 'reasoning.encrypted_content'], stream_options: { include_obfuscation: false }, user: 'u', safety_identifier: 's', top_logprobs: 2 })
  t.equal(unknown.statusCode, 200, 'unknown fields and accepted-not-used ones pass')
  t.equal(backend.lastRequest?.cacheScope?.includes('thread-1'), false, 'prompt_cache_key is not a cache salt')
  const nulls = await ask({ model: 'scripted', input: [{ type: 'message', role: 'user', content: 'x', id: null, status: null }], instructions: null, tools: null, tool_choice: null, text: null, reasoning: null, metadata: null, store: null, temperature: null })
  t.equal(nulls.statusCode, 200, `null means absent: ${nulls.body}`)
  t.equal((await ask({ model: 'scripted', input: 'still serving' })).statusCode, 200)
})

t.test('failures: a refusal before the first token keeps its status, streamed or not; one after it is response.failed; a store that fails does not fail the response', async t => {
  const refusing = new ScriptedBackend({ id: 'refusing', refuse: new ApiError('context_length_exceeded', 'The conversation is too long.', { param: 'messages' }) })
  const failing = new ScriptedBackend({ id: 'failing', failAfter: { deltas: 2, error: new ApiError('upstream_error', 'The upstream broke.') } })
  const store = new MemoryResponseStore()
  store.save = async () => { throw new Error('disk full') }
  const { app, auth } = await buildResponsesApp(t, { backends: [refusing, failing, new ScriptedBackend()], store })
  for (const stream of [false, true]) {
    const res = await app.inject({ method: 'POST', url: URL, headers: auth, payload: { model: 'refusing', input: 'x', stream } })
    t.equal(res.statusCode, 400, `refused, stream ${stream}`)
    t.match(res.json().error, { code: 'context_length_exceeded', param: 'input' })
  }
  const streamed = parseEvents((await app.inject({ method: 'POST', url: URL, headers: auth, payload: { model: 'failing', input: 'x', stream: true } })).body)
  const failed = streamed.at(-1)!
  t.equal(failed.event, 'response.failed')
  t.match(failed.data.response, { status: 'failed', error: { code: 'upstream_error', message: 'The upstream broke.' } })
  t.equal(((failed.data.response as { output: Array<{ content?: Array<{ text: string }> }> }).output[0].content ?? []).length, 0, 'the message open when it failed is shown as it was added')
  const whole = await app.inject({ method: 'POST', url: URL, headers: auth, payload: { model: 'failing', input: 'x' } })
  t.equal(whole.statusCode, 502)
  const kept = await app.inject({ method: 'POST', url: URL, headers: auth, payload: { model: 'scripted', input: 'x' } })
  t.equal(kept.statusCode, 200, 'the store failing does not fail the response')
})
