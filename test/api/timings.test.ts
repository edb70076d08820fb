// Per-response timings (X-Chatd-Timings: 1, src/api/pipeline/timings.ts): a
// Server-Timing header on every door's whole reply, a `timings` object in a
// chat completion's body or its stream's finish chunk; nothing without the
// header, and a clear 400 for a value that is neither yes nor no.

import t from 'tap'
import { buildTestApp, chatBody } from '../helpers/app.ts'
import { ScriptedBackend } from '../helpers/scripted-backend.ts'

const SERVER_TIMING = /^ttft;dur=[\d.]+, decode;dur=[\d.]+, total;dur=[\d.]+$/

t.test('a chat completion with X-Chatd-Timings: 1 carries its timings', async t => {
  const test = await buildTestApp(t, { backends: [new ScriptedBackend({ delayMs: 5 })] })
  const res = await test.app.inject({ method: 'POST', url: '/api/v1/chat/completions', headers: { ...test.auth, 'x-chatd-timings': '1' }, payload: chatBody() })
  t.equal(res.statusCode, 200)
  t.match(res.headers['server-timing'], SERVER_TIMING)
  const { timings, usage } = res.json()
  t.match(timings, { prompt_n: usage.prompt_tokens, cache_n: 0, predicted_n: usage.completion_tokens })
  t.ok(timings.total_ms >= timings.ttft_ms && timings.ttft_ms >= 0, 'the first output before the end')
  t.ok(timings.predicted_ms >= 15, 'four words 5 ms apart: at least 15 ms from the first to the last')
  t.ok(timings.predicted_per_second > 0)
  t.notOk('queue_ms' in timings, 'no engine queue for a backend without one')

  const streamed = await test.app.inject({ method: 'POST', url: '/api/v1/chat/completions', headers: { ...test.auth, 'x-chatd-timings': 'true' }, payload: chatBody({ stream: true, stream_options: { include_usage: true } }) })
  const chunks = streamed.body.split('\n\n').filter(f => f.startsWith('data: {')).map(f => JSON.parse(f.slice(6)))
  const withTimings = chunks.filter(c => c.timings)
  t.equal(withTimings.length, 1, 'one chunk carries them')
  t.equal(withTimings[0].choices[0].finish_reason, 'stop', 'the finish chunk')
  t.equal(withTimings[0].timings.predicted_n, chunks.at(-1).usage.completion_tokens)
})

t.test('every door\'s whole reply carries Server-Timing; none without the header', async t => {
  const test = await buildTestApp(t)
  const asked = { ...test.auth, 'x-chatd-timings': '1' }
  const responses = await test.app.inject({ method: 'POST', url: '/api/v1/responses', headers: asked, payload: { model: 'scripted', input: 'hi' } })
  t.equal(responses.statusCode, 200)
  t.match(responses.headers['server-timing'], SERVER_TIMING)
  const messages = await test.app.inject({ method: 'POST', url: '/api/v1/messages', headers: asked, payload: { model: 'scripted', max_tokens: 64, messages: [{ role: 'user', content: 'hi' }] } })
  t.equal(messages.statusCode, 200)
  t.match(messages.headers['server-timing'], SERVER_TIMING)
  const plain = await test.app.inject({ method: 'POST', url: '/api/v1/chat/completions', headers: test.auth, payload: chatBody() })
  t.notOk(plain.headers['server-timing'])
  t.notOk('timings' in plain.json())
  const no = await test.app.inject({ method: 'POST', url: '/api/v1/chat/completions', headers: { ...test.auth, 'x-chatd-timings': '0' }, payload: chatBody() })
  t.notOk(no.headers['server-timing'])
})

t.test('a value other than 1, true, 0 or false is a 400 in each door\'s shape, before any work', async t => {
  const backend = new ScriptedBackend()
  const test = await buildTestApp(t, { backends: [backend] })
  for (const value of ['yes', '2', 'x'.repeat(4000), '1,1']) {
    const res = await test.app.inject({ method: 'POST', url: '/api/v1/chat/completions', headers: { ...test.auth, 'x-chatd-timings': value }, payload: chatBody() })
    t.equal(res.statusCode, 400)
    t.match(res.json().error, { code: 'invalid_parameter', param: 'x-chatd-timings' })
  }
  const messages = await test.app.inject({ method: 'POST', url: '/api/v1/messages', headers: { ...test.auth, 'x-chatd-timings': 'maybe' }, payload: { model: 'scripted', max_tokens: 64, messages: [{ role: 'user', content: 'hi' }] } })
  t.equal(messages.statusCode, 400)
  t.equal(messages.json().type, 'error', 'Anthropic\'s error shape')
  t.equal(backend.lastRequest, undefined, 'nothing reached the model')
  const usage = (await test.app.inject({ url: '/api/v1/usage', headers: test.auth })).json()
  t.equal(usage.used.calls_this_month, 0, 'nothing was counted against the account')
})
