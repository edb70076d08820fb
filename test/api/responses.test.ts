// POST /api/v1/responses on scripted backends: the response object and its
// stream (whose deltas add up to it), input items and tools as the backend
// receives them, function calls there and back (namespaced too), text.format,
// reasoning sealed and sent back, stored responses chained by
// previous_response_id, the usage row under the response's id, and hostile or
// unsupported bodies refused with 400 naming the field.

import t from 'tap'
import type { GenerateEvent } from '../../src/engine/backend.ts'
import { ScriptedBackend } from '../helpers/scripted-backend.ts'
import { buildResponsesApp, parseEvents, ScriptBackend, usage } from '../helpers/responses-app.ts'

const URL = '/api/v1/responses'

const textReply = (...words: string[]): GenerateEvent[] => [
  ...words.map(content => ({ type: 'delta' as const, content })),
  { type: 'finish', reason: 'stop', usage: usage(7, words.length) },
]

const callReply = (name: string, args: string, id = 'call_1'): GenerateEvent[] => [
  { type: 'delta', toolCalls: [{ index: 0, id, name }] },
  { type: 'delta', toolCalls: [{ index: 0, arguments: args.slice(0, 5) }] },
  { type: 'delta', toolCalls: [{ index: 0, arguments: args.slice(5) }] },
  { type: 'finish', reason: 'tool_calls', usage: usage(20, 9) },
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
