// The SSE wire format of docs/design.md, with a scripted backend: the exact frame
// sequence, keep-alive comments, refusals before the stream (HTTP status) and
// failures during it (error event), reasoning modes, and that a client going
// away stops generation. Real generation is covered by e2e-openai.test.ts.

import { once } from 'node:events'
import http from 'node:http'
import type { AddressInfo } from 'node:net'
import t from 'tap'
import OpenAI from 'openai'
import { ApiError } from '../../src/errors.ts'
import { buildTestApp, chatBody, type TestApp } from '../helpers/app.ts'
import { ScriptedBackend } from '../helpers/scripted-backend.ts'

const URL = '/api/v1/chat/completions'

/** The raw `data:` payloads and comments of an SSE body, in order. Checks framing only: every frame ends with a blank line. */
function frames (body: string): string[] {
  if (!body.endsWith('\n\n')) throw new Error(`the body does not end with a complete frame: ${JSON.stringify(body.slice(-40))}`)
  return body.slice(0, -2).split('\n\n')
}

async function listen (test: TestApp): Promise<{ baseURL: string; port: number; client: OpenAI }> {
  await test.app.listen({ port: 0, host: '127.0.0.1' })
  const { port } = test.app.server.address() as AddressInfo
  const baseURL = `http://127.0.0.1:${port}/api/v1`
  return { baseURL, port, client: new OpenAI({ apiKey: test.key, baseURL, maxRetries: 0 }) }
}

t.test('exact frame sequence: role, deltas, finish, [DONE]', async t => {
  const { app, auth } = await buildTestApp(t, { backends: [new ScriptedBackend({ words: ['Once', ' upon', ' a', ' time'] })] })
  const res = await app.inject({ method: 'POST', url: URL, headers: auth, payload: chatBody({ stream: true }) })
  t.equal(res.statusCode, 200)
  t.match(res.headers['content-type'], /^text\/event-stream/)
  t.equal(res.headers['x-accel-buffering'], 'no')
  t.equal(res.headers['cache-control'], 'no-cache, no-transform')

  const raw = frames(res.body)
  t.equal(raw.at(-1), 'data: [DONE]')
  for (const frame of raw) t.match(frame, /^data: /, 'every frame is a data line')
  const chunks = raw.slice(0, -1).map(f => JSON.parse(f.slice('data: '.length)))
  t.equal(chunks.length, 6)
  const [first] = chunks
  t.match(first.id, /^chatcmpl-[A-Za-z0-9_-]{16,}$/)
  t.equal(first.object, 'chat.completion.chunk')
  t.equal(first.model, 'scripted')
  t.match(first.system_fingerprint, /^fp_/)
  t.ok(Number.isInteger(first.created) && Math.abs(first.created - Date.now() / 1000) < 60, 'created is unix seconds')
  for (const c of chunks) {
    t.equal(c.id, first.id, 'one id for the whole stream')
    t.equal(c.created, first.created)
    t.notOk('usage' in c, 'no usage field without include_usage')
  }
  t.same(chunks.map(c => c.choices), [
    [{ index: 0, delta: { role: 'assistant', content: '' }, finish_reason: null }],
    [{ index: 0, delta: { content: 'Once' }, finish_reason: null }],
    [{ index: 0, delta: { content: ' upon' }, finish_reason: null }],
    [{ index: 0, delta: { content: ' a' }, finish_reason: null }],
    [{ index: 0, delta: { content: ' time' }, finish_reason: null }],
    [{ index: 0, delta: {}, finish_reason: 'stop' }],
  ])
})

t.test('include_usage adds a usage chunk with no choices before [DONE]', async t => {
  const { app, auth } = await buildTestApp(t)
  const res = await app.inject({ method: 'POST', url: URL, headers: auth, payload: chatBody({ stream: true, stream_options: { include_usage: true }, max_tokens: 2 }) })
  const raw = frames(res.body)
  t.equal(raw.at(-1), 'data: [DONE]')
  const chunks = raw.slice(0, -1).map(f => JSON.parse(f.slice(6)))
  const usage = chunks.at(-1)
  t.same(usage.choices, [])
  t.same(usage.usage, { prompt_tokens: 4, completion_tokens: 2, total_tokens: 6 })
  t.same(chunks.at(-2).choices, [{ index: 0, delta: {}, finish_reason: 'length' }], 'max_tokens ends with length')
  for (const c of chunks.slice(0, -1)) t.equal(c.usage, null, 'other chunks carry usage: null')
})

t.test('keep-alive comments while the first token is slow', async t => {
  const backend = new ScriptedBackend({ firstDelayMs: 350, words: ['Hi'] })
  const { app, auth, metrics } = await buildTestApp(t, { backends: [backend], env: { SSE_KEEPALIVE_MS: '100' } })
  const pending = app.inject({ method: 'POST', url: URL, headers: auth, payload: chatBody({ stream: true }) })
  await new Promise(resolve => setTimeout(resolve, 150))
  t.match(await metrics.registry.getSingleMetricAsString('chatd_queue_length'), /model="scripted"} 1/, 'waiting for its first event counts as queued')
  const res = await pending
  t.match(await metrics.registry.getSingleMetricAsString('chatd_queue_length'), /model="scripted"} 0/)
  t.equal(res.statusCode, 200)
  const raw = frames(res.body)
  const comments = raw.filter(f => f === ': keep-alive')
  t.ok(comments.length >= 2, `keep-alive comments sent (${comments.length})`)
  t.equal(raw.filter(f => f.startsWith(':') && f !== ': keep-alive').length, 0)
  const data = raw.filter(f => f.startsWith('data: '))
  t.same(data.slice(1, -1).map(f => JSON.parse(f.slice(6)).choices[0].delta), [{ content: 'Hi' }, {}])
  t.equal(data.at(-1), 'data: [DONE]')
})

t.test('a refusal before the first event keeps its HTTP status', async t => {
  const refuse = new ApiError('context_length_exceeded', 'This model\'s context is 512 tokens; the prompt and max_tokens need 900.', { param: 'messages' })
  const { app, auth } = await buildTestApp(t, { backends: [new ScriptedBackend({ refuse })] })
  for (const stream of [true, false]) {
    const res = await app.inject({ method: 'POST', url: URL, headers: auth, payload: chatBody({ stream }) })
    t.equal(res.statusCode, 400, `stream=${stream}`)
    t.match(res.headers['content-type'], /application\/json/)
    t.same(res.json(), refuse.toBody())
  }
})

t.test('a failure mid-stream is an error event and ends the stream', async t => {
  const backend = new ScriptedBackend({ words: ['a', 'b', 'c'], failAfter: { deltas: 2, error: new ApiError('internal_error', 'the engine crashed') } })
  const test = await buildTestApp(t, { backends: [backend] })
  const res = await test.app.inject({ method: 'POST', url: URL, headers: test.auth, payload: chatBody({ stream: true }) })
  t.equal(res.statusCode, 200)
  const raw = frames(res.body)
  t.same(JSON.parse(raw.at(-1)!.slice(6)), { error: { message: 'the engine crashed', type: 'server_error', param: null, code: 'internal_error' } })
  t.notOk(raw.includes('data: [DONE]'))
  t.equal(raw.length, 4, 'role, two deltas, error')
  t.match(await test.metrics.registry.getSingleMetricAsString('chatd_errors_total'), /code="internal_error"} 1/)
  t.match(await test.metrics.registry.getSingleMetricAsString('chatd_active_requests'), /model="scripted"} 0/)

  // Unexpected exceptions are not leaked to the client.
  const crashing = new ScriptedBackend({ id: 'crashing', failAfter: { deltas: 1, error: new TypeError('secret internals') } })
  const test2 = await buildTestApp(t, { backends: [crashing] })
  const res2 = await test2.app.inject({ method: 'POST', url: URL, headers: test2.auth, payload: chatBody({ model: 'crashing', stream: true }) })
  const last = JSON.parse(frames(res2.body).at(-1)!.slice(6))
  t.equal(last.error.code, 'internal_error')
  t.notMatch(last.error.message, 'secret')

  // The official client surfaces the error event as an exception.
  const { client } = await listen(test)
  const stream = await client.chat.completions.create({ model: 'scripted', messages: [{ role: 'user', content: 'x' }], stream: true })
  await t.rejects(async () => { for await (const chunk of stream) void chunk }, /the engine crashed/)
})

t.test('reasoning modes', async t => {
  const make = (id: string) => new ScriptedBackend({ id, thinking: ['Let me', ' think.'], words: ['Answer', '.'] })
  const { app, auth } = await buildTestApp(t, {
    backends: [{ backend: make('separate') }, { backend: make('hidden'), reasoning: 'hidden' }, { backend: make('inline'), reasoning: 'inline' }],
  })
  const ask = async (model: string, stream = false) => app.inject({ method: 'POST', url: URL, headers: auth, payload: chatBody({ model, stream }) })

  t.same((await ask('separate')).json().choices[0].message, { role: 'assistant', content: 'Answer.', reasoning_content: 'Let me think.' })
  t.same((await ask('hidden')).json().choices[0].message, { role: 'assistant', content: 'Answer.' })
  t.same((await ask('inline')).json().choices[0].message, { role: 'assistant', content: 'Let me think.</think>Answer.' })

  const deltas = frames((await ask('separate', true)).body).slice(1, -2).map(f => JSON.parse(f.slice(6)).choices[0].delta)
  t.same(deltas, [{ reasoning_content: 'Let me' }, { reasoning_content: ' think.' }, { content: 'Answer' }, { content: '.' }])
})

t.test('the official client reads both reply modes', async t => {
  const test = await buildTestApp(t)
  const { client } = await listen(test)
  const completion = await client.chat.completions.create({ model: 'scripted', messages: [{ role: 'user', content: 'Tell me a story' }] })
  t.equal(completion.object, 'chat.completion')
  t.equal(completion.choices[0].message.content, 'Once upon a time')
  t.equal(completion.choices[0].finish_reason, 'stop')
  t.same(completion.usage, { prompt_tokens: 4, completion_tokens: 4, total_tokens: 8 })

  const stream = await client.chat.completions.create({ model: 'scripted', messages: [{ role: 'user', content: 'Tell me a story' }], stream: true, stream_options: { include_usage: true } })
  let text = ''
  let usage
  const finishes = []
  for await (const chunk of stream) {
    text += chunk.choices[0]?.delta.content ?? ''
    if (chunk.choices[0]?.finish_reason) finishes.push(chunk.choices[0].finish_reason)
    if (chunk.usage) usage = chunk.usage
  }
  t.equal(text, 'Once upon a time')
  t.same(finishes, ['stop'])
  t.same(usage, { prompt_tokens: 4, completion_tokens: 4, total_tokens: 8 })
})

/** Sends a raw request and destroys the socket once `readBytes` of the response have arrived (0: right after sending). */
async function disconnectAfter (port: number, key: string, body: unknown, readBytes: number): Promise<string> {
  const req = http.request({ port, host: '127.0.0.1', method: 'POST', path: URL, headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' } })
  req.on('error', () => {})
  req.end(JSON.stringify(body))
  if (readBytes === 0) {
    await new Promise(resolve => setTimeout(resolve, 100))
    req.destroy()
    return ''
  }
  const [res] = await once(req, 'response') as [http.IncomingMessage]
  let got = ''
  for await (const chunk of res) {
    got += chunk
    if (got.length >= readBytes) break
  }
  req.destroy()
  return got
}

async function until (condition: () => boolean | Promise<boolean>, ms = 5000): Promise<boolean> {
  const deadline = Date.now() + ms
  while (Date.now() < deadline) {
    if (await condition()) return true
    await new Promise(resolve => setTimeout(resolve, 10))
  }
  return false
}

t.test('a client that disconnects stops generation (stream and non-stream)', async t => {
  const words = Array.from({ length: 200 }, (_, i) => ` w${i}`)
  const backend = new ScriptedBackend({ words, delayMs: 20 })
  const test = await buildTestApp(t, { backends: [backend] })
  const { port } = await listen(test)

  const got = await disconnectAfter(port, test.key, chatBody({ stream: true }), 400)
  t.match(got, /"role":"assistant"/, 'the stream had started')
  t.ok(await until(() => backend.running === 0), 'generation ended')
  t.ok(backend.cancelled, 'the backend saw the abort')
  t.ok(backend.emitted < 50, `stopped early (${backend.emitted} of 200 words)`)
  t.match(await test.metrics.registry.getSingleMetricAsString('chatd_active_requests'), /model="scripted"} 0/)
  t.match(await test.metrics.registry.getSingleMetricAsString('chatd_completions_total'), /finish_reason="cancelled"} 1/)

  await disconnectAfter(port, test.key, chatBody(), 0)
  t.ok(await until(() => backend.running === 0 && backend.cancelled), 'non-streamed generation stopped too')
  t.ok(backend.emitted < 50, `stopped early (${backend.emitted} of 200 words)`)
  t.match(await test.metrics.registry.getSingleMetricAsString('chatd_active_requests'), /model="scripted"} 0/)
})

t.test('a client that stays gets the whole reply (the abort signal does not fire early)', async t => {
  const backend = new ScriptedBackend({ words: ['a', 'b', 'c'], delayMs: 30 })
  const test = await buildTestApp(t, { backends: [backend] })
  const { client } = await listen(test)
  const completion = await client.chat.completions.create({ model: 'scripted', messages: [{ role: 'user', content: 'x' }] })
  t.equal(completion.choices[0].message.content, 'abc')
  t.notOk(backend.cancelled)
})

t.test('QUEUE_SIZE bounds the requests in progress per model: one more gets 503 at once', async t => {
  const backend = new ScriptedBackend({ words: ['a', 'b', 'c', 'd'], delayMs: 40 })
  const test = await buildTestApp(t, { backends: [backend, new ScriptedBackend({ id: 'other' })], env: { QUEUE_SIZE: '2' } })
  const ask = (model = 'scripted', stream = false) => test.app.inject({ method: 'POST', url: URL, headers: test.auth, payload: chatBody({ model, stream }) })
  const running = [ask(), ask('scripted', true)]
  await until(() => backend.running === 2)
  const refused = await ask()
  t.match(await test.metrics.registry.getSingleMetricAsString('chatd_active_requests'), /model="scripted"} 2/)
  t.equal(refused.statusCode, 503)
  t.equal(refused.json().error.code, 'server_overloaded')
  t.equal(refused.json().error.type, 'server_error')
  t.equal(refused.headers['retry-after'], '1')
  t.equal((await ask('other')).statusCode, 200, 'other models are not affected')
  for (const res of await Promise.all(running)) t.equal(res.statusCode, 200)
  t.equal((await ask()).statusCode, 200, 'permits come back when generations end')

  // Refusals and failures give the permit back too.
  const failing = new ScriptedBackend({ id: 'failing', refuse: new ApiError('context_length_exceeded', 'too long') })
  const test2 = await buildTestApp(t, { backends: [failing], env: { QUEUE_SIZE: '1' } })
  for (let i = 0; i < 3; i++) {
    const res = await test2.app.inject({ method: 'POST', url: URL, headers: test2.auth, payload: chatBody({ model: 'failing' }) })
    t.equal(res.statusCode, 400, `refusal ${i} does not hold a permit`)
  }
})
