// Every invalid input named by the spec's tables gets 400 invalid_parameter with
// `param` naming the field (nested fields as messages[0].role); malformed JSON,
// oversized and non-JSON bodies get their own codes. Valid requests reach the
// backend with the spec's defaults and exactly the client's conversation.

import t from 'tap'
import { cacheScope } from '../../src/api/pipeline/cache-scope.ts'
import { ChatCompletionRequest } from '../../src/api/chat/schema.ts'
import { buildTestApp, chatBody } from '../helpers/app.ts'
import { ScriptedBackend } from '../helpers/scripted-backend.ts'

const URL = '/api/v1/chat/completions'

const INVALID: Array<[string, Record<string, unknown>, string]> = [
  ['temperature below 0', { temperature: -0.1 }, 'temperature'],
  ['temperature above 2', { temperature: 2.01 }, 'temperature'],
  ['temperature as a string', { temperature: '0.5' }, 'temperature'],
  ['top_p below 0', { top_p: -0.01 }, 'top_p'],
  ['top_p above 1', { top_p: 1.5 }, 'top_p'],
  ['top_p as a boolean', { top_p: true }, 'top_p'],
  ['top_k negative', { top_k: -1 }, 'top_k'],
  ['top_k fractional', { top_k: 1.5 }, 'top_k'],
  ['top_k as a string', { top_k: '3' }, 'top_k'],
  ['wordcount zero', { wordcount: 0 }, 'wordcount'],
  ['wordcount negative', { wordcount: -5 }, 'wordcount'],
  ['wordcount fractional', { wordcount: 2.5 }, 'wordcount'],
  ['wordcount another word', { wordcount: 'Long' }, 'wordcount'],
  ['wordcount numeric string', { wordcount: '300' }, 'wordcount'],
  ['wordcount above its maximum', { wordcount: 100001 }, 'wordcount'],
  ['role outside user/assistant/system', { messages: [{ role: 'bot', content: 'hi' }] }, 'messages[0].role'],
  ['role of a later message', { messages: [{ role: 'user', content: 'hi' }, { role: 'tool', content: 'x' }] }, 'messages[1].role'],
  ['message without role', { messages: [{ content: 'hi' }] }, 'messages[0].role'],
  ['message without content', { messages: [{ role: 'user' }] }, 'messages[0].content'],
  ['content a number', { messages: [{ role: 'user', content: 42 }] }, 'messages[0].content'],
  ['content null', { messages: [{ role: 'user', content: null }] }, 'messages[0].content'],
  ['content part of another type', { messages: [{ role: 'user', content: [{ type: 'image_url', text: 'x' }] }] }, 'messages[0].content[0].type'],
  ['content part without text', { messages: [{ role: 'user', content: [{ type: 'text' }] }] }, 'messages[0].content[0].text'],
  ['message not an object', { messages: ['hi'] }, 'messages[0]'],
  ['empty messages', { messages: [] }, 'messages'],
  ['messages not an array', { messages: 'hi' }, 'messages'],
  ['model a number', { model: 42 }, 'model'],
  ['model empty', { model: '' }, 'model'],
  ['stream a string', { stream: 'yes' }, 'stream'],
  ['googleSearchStatus a string', { googleSearchStatus: 'true' }, 'googleSearchStatus'],
  ['language empty', { language: '' }, 'language'],
  ['language too long', { language: 'x'.repeat(65) }, 'language'],
  ['tone a number', { tone: 5 }, 'tone'],
  ['n other than 1', { n: 2 }, 'n'],
  ['max_tokens zero', { max_tokens: 0 }, 'max_tokens'],
  ['max_tokens fractional', { max_tokens: 1.5 }, 'max_tokens'],
  ['max_completion_tokens negative', { max_completion_tokens: -1 }, 'max_completion_tokens'],
  ['more than 4 stop strings', { stop: ['a', 'b', 'c', 'd', 'e'] }, 'stop'],
  ['stop a number', { stop: 7 }, 'stop'],
  ['seed fractional', { seed: 1.5 }, 'seed'],
  ['stream_options not an object', { stream_options: 'yes' }, 'stream_options'],
  ['include_usage a string', { stream_options: { include_usage: 'yes' } }, 'stream_options.include_usage'],
  ['presence_penalty out of range', { presence_penalty: 3 }, 'presence_penalty'],
]

t.test('invalid fields get 400 invalid_parameter naming the field', async t => {
  const { app, auth } = await buildTestApp(t)
  for (const [name, patch, param] of INVALID) {
    const res = await app.inject({ method: 'POST', url: URL, headers: auth, payload: chatBody(patch) })
    t.equal(res.statusCode, 400, `${name}: status`)
    const body = res.json()
    t.same(body.error.code, 'invalid_parameter', `${name}: code`)
    t.equal(body.error.type, 'invalid_request_error', `${name}: type`)
    t.equal(body.error.param, param, `${name}: param`)
    t.match(body.error.message, param.replace(/\[\d+\]$/, ''), `${name}: message names the field`)
  }
})

t.test('missing required fields name the field', async t => {
  const { app, auth } = await buildTestApp(t)
  for (const field of ['model', 'messages']) {
    const payload = chatBody()
    delete payload[field]
    const res = await app.inject({ method: 'POST', url: URL, headers: auth, payload })
    t.equal(res.statusCode, 400)
    t.same(res.json().error, { message: `Missing required parameter: '${field}'.`, type: 'invalid_request_error', param: field, code: 'invalid_parameter' })
  }
})

t.test('bodies that are not a JSON object', async t => {
  const { app, auth, config } = await buildTestApp(t)
  const json = { ...auth, 'content-type': 'application/json' }

  const malformed = await app.inject({ method: 'POST', url: URL, headers: json, payload: '{"model": "scripted", "messages": [' })
  t.equal(malformed.statusCode, 400)
  t.equal(malformed.json().error.code, 'invalid_json')
  t.equal(malformed.json().error.type, 'invalid_request_error')

  const empty = await app.inject({ method: 'POST', url: URL, headers: json, payload: '' })
  t.equal(empty.statusCode, 400)
  t.equal(empty.json().error.code, 'invalid_json')

  const array = await app.inject({ method: 'POST', url: URL, headers: json, payload: '[]' })
  t.equal(array.statusCode, 400)
  t.equal(array.json().error.code, 'invalid_parameter')
  t.equal(array.json().error.param, null)

  const huge = JSON.stringify(chatBody({ messages: [{ role: 'user', content: 'x'.repeat(config.bodyLimit) }] }))
  const tooLarge = await app.inject({ method: 'POST', url: URL, headers: json, payload: huge })
  t.equal(tooLarge.statusCode, 413)
  t.equal(tooLarge.json().error.code, 'request_too_large')

  const text = await app.inject({ method: 'POST', url: URL, headers: { ...auth, 'content-type': 'text/plain' }, payload: 'hello' })
  t.equal(text.statusCode, 415)
  t.equal(text.json().error.code, 'unsupported_media_type')
})

t.test('googleSearchStatus without a search provider is refused, not ignored', async t => {
  const { app, auth } = await buildTestApp(t)
  const res = await app.inject({ method: 'POST', url: URL, headers: auth, payload: chatBody({ googleSearchStatus: true }) })
  t.equal(res.statusCode, 400)
  t.same(res.json().error.code, 'search_unavailable')
  t.same(res.json().error.param, 'googleSearchStatus')
})

t.test('defaults reach the backend and the conversation is passed as sent', async t => {
  const backend = new ScriptedBackend()
  const { app, auth, account } = await buildTestApp(t, { backends: [backend] })
  const messages = [
    { role: 'system', content: 'Be brief.' },
    { role: 'user', content: 'Hi' },
    { role: 'assistant', content: 'Hello.' },
    { role: 'user', content: 'Tell me a story' },
  ]
  const res = await app.inject({ method: 'POST', url: URL, headers: auth, payload: { model: 'scripted', messages } })
  t.equal(res.statusCode, 200)
  t.same(backend.lastRequest, { messages, maxTokens: undefined, temperature: 1, topP: 1, topK: 0, seed: undefined, stop: [], cacheScope: cacheScope(account.id), clientSampling: { temperature: false, topP: false, topK: false } })

  // Non-default controls become one instruction after the client's system
  // message (test/prompt/controls.test.ts has every combination).
  const withControls = await app.inject({ method: 'POST', url: URL, headers: auth, payload: { model: 'scripted', messages, language: 'French', tone: 'Formal', wordcount: 300 } })
  t.equal(withControls.statusCode, 200)
  t.same(backend.lastRequest?.messages, [
    { role: 'system', content: 'Be brief.\n\nAnswer in French. Write in a formal tone, without slang or contractions. Keep the answer to about 300 words.' },
    ...messages.slice(1),
  ])
})

t.test('accepted extras', async t => {
  const backend = new ScriptedBackend()
  const { app, auth, account } = await buildTestApp(t, { backends: [backend] })
  const send = (patch: Record<string, unknown>) => app.inject({ method: 'POST', url: URL, headers: auth, payload: chatBody(patch) })

  let res = await send({ temperature: 0, top_p: 0.5, top_k: 40, seed: 7, max_tokens: 10, stop: 'END', n: 1, presence_penalty: 0.5, frequency_penalty: -0.5, user: 'u1', unknown_field: { anything: true } })
  t.equal(res.statusCode, 200, res.body)
  t.same(backend.lastRequest, { messages: [{ role: 'user', content: 'Tell me a story' }], maxTokens: 10, temperature: 0, topP: 0.5, topK: 40, seed: 7, stop: ['END'], cacheScope: cacheScope(account.id), clientSampling: { temperature: true, topP: true, topK: true }, presencePenalty: 0.5, frequencyPenalty: -0.5 })

  res = await send({ max_tokens: 10, max_completion_tokens: 3, stop: ['a', 'b', 'c', 'd'] })
  t.equal(res.statusCode, 200)
  t.equal(backend.lastRequest?.maxTokens, 3, 'max_completion_tokens wins')
  t.same(backend.lastRequest?.stop, ['a', 'b', 'c', 'd'])

  res = await send({ max_tokens: null, stop: null, seed: null, n: null, stream_options: null, user: null })
  t.equal(res.statusCode, 200, 'null extras mean absent')
  t.same(backend.lastRequest?.stop, [])

  res = await send({ messages: [{ role: 'user', content: [{ type: 'text', text: 'Tell me ' }, { type: 'text', text: 'a story' }] }] })
  t.equal(res.statusCode, 200)
  t.same(backend.lastRequest?.messages, [{ role: 'user', content: 'Tell me a story' }], 'text parts are joined')

  for (const edge of [{ temperature: 0 }, { temperature: 2 }, { top_p: 0 }, { top_p: 1 }, { top_k: 0 }, { wordcount: 'Default' }, { wordcount: 1 }]) {
    res = await send(edge)
    t.equal(res.statusCode, 200, `inclusive edge ${JSON.stringify(edge)}`)
  }

  // top_logprobs: 0 is the documented default: it stands without logprobs, and asks for nothing.
  for (const body of [{ top_logprobs: 0 }, { logprobs: false, top_logprobs: 0 }]) {
    res = await send(body)
    t.equal(res.statusCode, 200, JSON.stringify(body))
    t.equal(backend.lastRequest?.logprobs, undefined)
    t.equal(res.json().choices[0].logprobs ?? null, null)
  }
  res = await send({ top_logprobs: 1 })
  t.equal(res.statusCode, 400)
  t.match(res.json().error, { code: 'invalid_parameter', param: 'top_logprobs', message: 'top_logprobs 1 needs logprobs: true.' })
})

t.test('null counts as absent for every optional field, the spec\'s own included', async t => {
  const backend = new ScriptedBackend()
  const { app, auth } = await buildTestApp(t, { backends: [backend] })
  const send = (patch: Record<string, unknown>) => app.inject({ method: 'POST', url: URL, headers: auth, payload: chatBody(patch) })
  const schema = ChatCompletionRequest as unknown as { properties: Record<string, unknown>; required: string[] }
  const optional = Object.keys(schema.properties).filter(name => !schema.required.includes(name))
  // The list is read from the schema, so a new optional field is covered too; this pins the ones the spec names.
  for (const field of ['language', 'tone', 'wordcount', 'googleSearchStatus', 'stream', 'temperature', 'top_p', 'top_k', 'stream_options', 'max_tokens', 'max_completion_tokens', 'stop', 'seed', 'n', 'presence_penalty', 'frequency_penalty', 'user']) {
    t.ok(optional.includes(field), `${field} is optional`)
  }

  const plain = await send({})
  t.equal(plain.statusCode, 200)
  const defaults = backend.lastRequest

  for (const field of optional) {
    const res = await send({ [field]: null })
    t.equal(res.statusCode, 200, `${field}: null is accepted (${res.body})`)
    t.match(res.headers['content-type'], /^application\/json/, `${field}: null is not a stream`)
    t.same(backend.lastRequest, defaults, `${field}: null gets the default`)
  }
  const allNull = await send(Object.fromEntries(optional.map(field => [field, null])))
  t.equal(allNull.statusCode, 200, 'every optional field null at once')
  t.same(backend.lastRequest, defaults)

  // Nested: stream_options.include_usage null is false (no usage chunk).
  const stream = await send({ stream: true, stream_options: { include_usage: null } })
  t.equal(stream.statusCode, 200, stream.body)
  const frames = stream.body.split('\n\n').filter(f => f.startsWith('data: {')).map(f => JSON.parse(f.slice(6)))
  t.ok(frames.length > 0)
  t.notOk(frames.some(f => f.choices.length === 0), 'no usage chunk')

  // Required fields stay required.
  for (const field of ['model', 'messages']) {
    const res = await send({ [field]: null })
    t.equal(res.statusCode, 400, `${field}: null is refused`)
    t.equal(res.json().error.param, field)
  }
})

t.test('the wordcount error says its range, maximum included', async t => {
  const { app, auth } = await buildTestApp(t)
  for (const wordcount of [0, 100001, 2.5, 'Long']) {
    const res = await app.inject({ method: 'POST', url: URL, headers: auth, payload: chatBody({ wordcount }) })
    t.equal(res.statusCode, 400)
    t.same(res.json().error, { message: 'Invalid value for \'wordcount\': must be "Default" or an integer from 1 to 100000.', type: 'invalid_request_error', param: 'wordcount', code: 'invalid_parameter' }, `wordcount ${JSON.stringify(wordcount)}`)
  }
})
