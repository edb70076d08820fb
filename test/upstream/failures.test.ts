// The upstream backend against scripted loopback upstreams: what it sends, and
// every way an upstream can fail (HTTP errors, slow first byte, a stall, a
// connection cut mid-stream, malformed SSE, the wrong JSON, nothing
// listening). Each gives its documented error, with nothing of the upstream's
// address or key in it, and nothing left running on either side.

import { once } from 'node:events'
import http from 'node:http'
import type { AddressInfo } from 'node:net'
import { setTimeout as sleep } from 'node:timers/promises'
import t, { type Test } from 'tap'
import { UpstreamBackend, type UpstreamBackendOptions } from '../../src/engine/upstream/backend.ts'
import type { UpstreamSettings } from '../../src/engine/upstream/settings.ts'
import { buildTestApp, type TestApp } from '../helpers/app.ts'
import { streamData } from '../helpers/sse-events.ts'
import { chunk, sseData, sseHead, streamReply, type Handler, type Loopback } from './loopback.ts'
import { relayApp } from './relay-app.ts'

const CHAT = '/api/v1/chat/completions'
const SECRET = 'sk-upstream-secret-0123456789'
const FAST: UpstreamSettings = { connectTimeoutMs: 1000, firstByteTimeoutMs: 2000, idleTimeoutMs: 2000, retries: 2 }

interface Setup extends TestApp {
  upstream: Loopback
  backend: UpstreamBackend
  ask: (body?: Record<string, unknown>) => Promise<{ statusCode: number; body: string; json: () => any }>
}

/** relayApp (relay-app.ts, listening) with the upstream's key and quick settings, and `ask`: a chat completion injected. */
async function setup (t: Test, handler: Handler, opts: Partial<UpstreamBackendOptions> = {}): Promise<Setup> {
  const test = await relayApp(t, handler, { apiKey: SECRET, settings: FAST, ...opts })
  const ask = (body: Record<string, unknown> = {}) => test.app.inject({
    method: 'POST',
    url: CHAT,
    headers: test.auth,
    payload: { model: 'relay', messages: [{ role: 'user', content: 'Hello there' }], ...body },
  })
  return { ...test, ask }
}

/** The `data:` payloads of an SSE body, parsed (the final [DONE] as the string). */
const frames = streamData

/** Checks an error body: code, status, and that neither the upstream's key nor its address leaked. */
function isCleanError (t: Test, res: { statusCode: number; body: string }, status: number, code: string, upstream: Loopback, message?: RegExp): void {
  t.equal(res.statusCode, status, `HTTP ${status}`)
  const error = JSON.parse(res.body).error
  t.equal(error.code, code)
  if (message) t.match(error.message, message)
  t.notMatch(res.body, SECRET, 'the key does not leak')
  t.notMatch(res.body, new URL(upstream.url).port, 'the address does not leak')
  t.notMatch(res.body, '127.0.0.1')
}

async function activeRequests (test: TestApp): Promise<number> {
  const text = (await test.app.inject({ url: '/metrics' })).body
  const line = text.split('\n').find(l => l.startsWith('chatd_active_requests{model="relay"}'))
  return line === undefined ? 0 : Number(line.split(' ').at(-1))
}

/** Nothing left running: the upstream has no open request and chatd no active generation. */
async function nothingRunning (t: Test, s: Setup): Promise<void> {
  t.ok(await s.upstream.settled(), 'the upstream has no request left open')
  t.equal(await activeRequests(s), 0, 'chatd has no generation left')
}

t.test('the request sent upstream: model name, key, stream with usage, sampling parameters', async t => {
  const s = await setup(t, (_req, res) => streamReply(res, [{ content: 'Hi' }], { usage: { prompt_tokens: 3, completion_tokens: 1, total_tokens: 4 } }))
  const res = await s.ask({ temperature: 0.5, top_p: 0.9, top_k: 40, seed: 7, max_tokens: 20, stop: ['END'] })
  t.equal(res.statusCode, 200, res.body)
  const [sent] = s.upstream.requests
  t.equal(sent.method, 'POST')
  t.equal(sent.path, '/v1/chat/completions')
  t.equal(sent.headers.authorization, `Bearer ${SECRET}`)
  t.same(JSON.parse(sent.body), {
    model: 'upstream-model',
    messages: [{ role: 'user', content: 'Hello there' }],
    stream: true,
    stream_options: { include_usage: true },
    temperature: 0.5,
    top_p: 0.9,
    max_tokens: 20,
    seed: 7,
    stop: ['END'],
  }, 'top_k is not sent unless the model sets passTopK')
  t.same(res.json().usage, { prompt_tokens: 3, completion_tokens: 1, total_tokens: 4 }, 'the upstream\'s usage is used')
  t.match(res.json().id, /^chatcmpl-/)
  t.not(res.json().id, 'chatcmpl-upstream', 'chatd\'s own id, not the upstream\'s')
  t.equal(res.json().model, 'relay')
})

t.test('passTopK sends top_k; no apiKey sends no Authorization; controls arrive shaped', async t => {
  const s = await setup(t, (_req, res) => streamReply(res, [{ content: 'Hi' }]), { passTopK: true, apiKey: '' })
  await s.ask({ top_k: 40, language: 'de', messages: [{ role: 'user', content: 'Hi' }, { role: 'assistant', content: '<think>x</think>Hello!' }, { role: 'user', content: 'More' }] })
  const sent = JSON.parse(s.upstream.requests[0].body)
  t.equal(sent.top_k, 40)
  t.equal(s.upstream.requests[0].headers.authorization, undefined)
  t.same(sent.messages, [
    { role: 'system', content: 'Answer in German.' },
    { role: 'user', content: 'Hi' },
    { role: 'assistant', content: 'Hello!' },
    { role: 'user', content: 'More' },
  ], 'the instruction first, earlier thinking stripped')
  await s.ask({ top_k: 0 })
  t.notOk('top_k' in JSON.parse(s.upstream.requests[1].body), 'top_k 0 (off) is not sent')
})

t.test('usage is estimated when the upstream gives none', async t => {
  const s = await setup(t, (_req, res) => streamReply(res, [{ content: 'One' }, { content: ' two' }, { reasoning_content: 'hmm' }]))
  const res = await s.ask()
  // 'Hello there' is 11 characters: ceil(11 / 4) + 4 per message; three deltas carried text.
  t.same(res.json().usage, { prompt_tokens: 7, completion_tokens: 3, total_tokens: 10 })
})

t.test('an upstream that answers with one JSON body instead of a stream', async t => {
  const s = await setup(t, (_req, res) => {
    res.writeHead(200, { 'content-type': 'application/json' })
    res.end(JSON.stringify({
      id: 'x',
      object: 'chat.completion',
      created: 1,
      model: 'm',
      choices: [{ index: 0, message: { role: 'assistant', content: 'Whole answer.', reasoning_content: 'Thought.' }, finish_reason: 'length' }],
      usage: { prompt_tokens: 5, completion_tokens: 6, total_tokens: 11 },
    }))
  })
  const res = await s.ask()
  t.equal(res.statusCode, 200)
  t.same(res.json().choices[0], { index: 0, message: { role: 'assistant', content: 'Whole answer.', reasoning_content: 'Thought.' }, finish_reason: 'length' })
  t.same(res.json().usage, { prompt_tokens: 5, completion_tokens: 6, total_tokens: 11 })
  const streamed = frames((await s.ask({ stream: true })).body)
  t.same((streamed[1] as { choices: Array<{ delta: unknown }> }).choices[0].delta, { reasoning_content: 'Thought.', content: 'Whole answer.' })
})

t.test('HTTP 500: retried, then 502 upstream_error', async t => {
  const s = await setup(t, (_req, res) => {
    res.writeHead(500, { 'content-type': 'application/json' })
    res.end(JSON.stringify({ error: { message: `internal failure at ${'127.0.0.1'} with key ${SECRET}` } }))
  })
  isCleanError(t, await s.ask(), 502, 'upstream_error', s.upstream, /failed \(HTTP 500\)/)
  t.equal(s.upstream.requests.length, 3, 'one attempt and two retries')
  isCleanError(t, await s.ask({ stream: true }), 502, 'upstream_error', s.upstream)
  t.equal(s.upstream.requests.length, 6, 'a streamed request gets the same status, before any frame')
  await nothingRunning(t, s)
})

t.test('a 503 then success: the retry answers', async t => {
  const s = await setup(t, (_req, res, _r, index) => {
    if (index === 0) {
      res.writeHead(503)
      res.end()
    } else {
      streamReply(res, [{ content: 'Back' }])
    }
  })
  const res = await s.ask()
  t.equal(res.statusCode, 200)
  t.equal(res.json().choices[0].message.content, 'Back')
  t.equal(s.upstream.requests.length, 2)
})

t.test('client errors are not retried: 401 names the credentials, a context overflow is 400', async t => {
  let status = 401
  const s = await setup(t, (_req, res) => {
    res.writeHead(status, { 'content-type': 'application/json' })
    res.end(JSON.stringify({ error: { message: status === 400 ? 'This model\'s maximum context length is 4096 tokens' : `bad key ${SECRET}` } }))
  })
  isCleanError(t, await s.ask(), 502, 'upstream_error', s.upstream, /credentials \(HTTP 401\)/)
  t.equal(s.upstream.requests.length, 1)
  status = 400
  isCleanError(t, await s.ask(), 400, 'context_length_exceeded', s.upstream)
  t.equal(s.upstream.requests.length, 2)
})

t.test('slow first byte: 504 upstream_timeout after the retries', async t => {
  // undici checks its header and body timeouts on a coarse clock (about a
  // second), so the upstream here is much slower than that.
  const s = await setup(t, async (_req, res) => {
    await sleep(6000, undefined, { ref: false })
    if (!res.destroyed) streamReply(res, [{ content: 'too late' }])
  }, { settings: { ...FAST, firstByteTimeoutMs: 150, retries: 1 } })
  const started = Date.now()
  isCleanError(t, await s.ask(), 504, 'upstream_timeout', s.upstream, /did not start its reply within 150 ms/)
  t.ok(Date.now() - started < 5000, 'gave up long before the upstream answered')
  t.equal(s.upstream.requests.length, 2, 'one retry')
  await nothingRunning(t, s)
  t.equal(s.upstream.abandoned, 2, 'both upstream requests were abandoned, not left waiting')
})

t.test('a stall mid-reply: 504 upstream_timeout (idle), no retry', async t => {
  const s = await setup(t, (_req, res) => {
    sseHead(res)
    sseData(res, chunk({ content: 'Start' }))
    // ...and nothing more.
  }, { settings: { ...FAST, idleTimeoutMs: 200 } })
  isCleanError(t, await s.ask(), 504, 'upstream_timeout', s.upstream, /stopped sending for 200 ms/)
  t.equal(s.upstream.requests.length, 1)
  const streamed = frames((await s.ask({ stream: true })).body)
  t.match(streamed.at(-1), { error: { code: 'upstream_timeout' } }, 'after the stream started: an error event')
  t.notOk(streamed.includes('[DONE]'))
  await nothingRunning(t, s)
})

t.test('connection cut mid-stream: 502, or an error event once streaming', async t => {
  const s = await setup(t, (_req, res) => {
    sseHead(res)
    sseData(res, chunk({ role: 'assistant', content: '' }))
    sseData(res, chunk({ content: 'Once' }))
    sseData(res, chunk({ content: ' upon' }))
    setTimeout(() => res.socket?.destroy(), 20)
  })
  isCleanError(t, await s.ask(), 502, 'upstream_error', s.upstream, /closed the connection before the reply was complete/)
  t.equal(s.upstream.requests.length, 1, 'no retry once the reply had begun')

  const streamed = frames((await s.ask({ stream: true })).body) as Array<Record<string, any>>
  const last: unknown = streamed.at(-1)
  t.same(streamed.slice(1, 3).map(c => c.choices[0].delta), [{ content: 'Once' }, { content: ' upon' }], 'what came is passed on')
  t.match(last, { error: { code: 'upstream_error', type: 'server_error' } })
  t.notOk((streamed as unknown[]).includes('[DONE]'))
  await nothingRunning(t, s)
})

t.test('an upstream stream that ends without finishing is cut off, not complete', async t => {
  const s = await setup(t, (_req, res) => {
    sseHead(res)
    sseData(res, chunk({ content: 'Once' }))
    res.end()
  })
  isCleanError(t, await s.ask(), 502, 'upstream_error', s.upstream, /closed the connection before the reply was complete/)
})

t.test('malformed SSE and the wrong JSON: 502 upstream_error', async t => {
  const replies: Array<[string, (res: http.ServerResponse) => void]> = [
    ['an event that is not JSON', res => { sseHead(res); res.end('data: {"choices": [\n\n') }],
    ['a chunk without choices', res => { sseHead(res); sseData(res, { hello: 'world' }); res.end() }],
    ['choices of the wrong type', res => { sseHead(res); sseData(res, { choices: 'none' }); res.end() }],
    ['content that is not text', res => { sseHead(res); sseData(res, chunk({ content: 42 })); res.end() }],
    ['a JSON body that is no completion', res => { res.writeHead(200, { 'content-type': 'application/json' }); res.end('{"hello":"world"}') }],
    ['a JSON body that does not parse', res => { res.writeHead(200, { 'content-type': 'application/json' }); res.end('{"choices": [') }],
    ['an HTML page', res => { res.writeHead(200, { 'content-type': 'text/html' }); res.end('<html>proxy login</html>') }],
  ]
  let current = replies[0][1]
  const s = await setup(t, (_req, res) => current(res))
  for (const [name, reply] of replies) {
    current = reply
    const res = await s.ask()
    t.equal(res.statusCode, 502, name)
    t.equal(res.json().error.code, 'upstream_error', name)
    t.match(res.json().error.message, /could not read/, name)
  }
  t.equal(s.upstream.requests.length, replies.length, 'none of these is retried')
  await nothingRunning(t, s)
})

t.test('an error event from the upstream mid-stream', async t => {
  const s = await setup(t, (_req, res) => {
    sseHead(res)
    sseData(res, chunk({ content: 'Once' }))
    sseData(res, { error: { message: `engine crashed at 127.0.0.1 ${SECRET}`, code: 'internal_error' } })
    res.end()
  })
  isCleanError(t, await s.ask(), 502, 'upstream_error', s.upstream, /reported an error/)
})

t.test('nothing listening: 502 after the retries, quickly', async t => {
  // A port that was free a moment ago: bind, note it, close.
  const probe = http.createServer().listen(0, '127.0.0.1')
  await once(probe, 'listening')
  const { port } = probe.address() as AddressInfo
  await new Promise(resolve => probe.close(resolve))
  const backend = new UpstreamBackend({ id: 'relay', baseUrl: `http://127.0.0.1:${port}/v1`, upstreamModel: 'm', settings: FAST })
  t.teardown(() => backend.close())
  const { app, auth } = await buildTestApp(t, { backends: [backend] })
  const res = await app.inject({ method: 'POST', url: CHAT, headers: auth, payload: { model: 'relay', messages: [{ role: 'user', content: 'Hi' }] } })
  t.equal(res.statusCode, 502)
  t.equal(res.json().error.code, 'upstream_error')
  t.equal(res.json().error.message, 'The upstream model server could not be reached (connection refused).')
  t.notMatch(res.body, String(port))
})

t.test('a client that disconnects aborts the upstream request', async t => {
  let upstreamClosed!: () => void
  const closed = new Promise<void>(resolve => { upstreamClosed = resolve })
  const s = await setup(t, (_req, res) => {
    sseHead(res)
    const timer = setInterval(() => sseData(res, chunk({ content: ' word' })), 20)
    res.once('close', () => {
      clearInterval(timer)
      upstreamClosed()
    })
  })
  const { port } = s.app.server.address() as AddressInfo
  const req = http.request({ port, host: '127.0.0.1', method: 'POST', path: CHAT, headers: { ...s.auth, 'content-type': 'application/json' } })
  req.on('error', () => {})
  req.end(JSON.stringify({ model: 'relay', messages: [{ role: 'user', content: 'Go on' }], stream: true }))
  const [res] = await once(req, 'response') as [http.IncomingMessage]
  let got = ''
  for await (const part of res) {
    got += part
    if (got.split(' word').length > 3) break
  }
  req.destroy()
  const outcome = await Promise.race([closed.then(() => 'closed'), new Promise(resolve => setTimeout(resolve, 5000, 'still open'))])
  t.equal(outcome, 'closed', 'the upstream request was aborted')
  await nothingRunning(t, s)
  t.equal(s.upstream.abandoned, 1)
})
