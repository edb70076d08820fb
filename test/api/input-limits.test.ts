// Size limits on the conversation (MAX_MESSAGES, MAX_MESSAGE_CHARS,
// MAX_CONTENT_PARTS) at and just past each boundary, with the defaults and with
// configured values; and the body-level refusals: 413 for a body over
// BODY_LIMIT (declared or chunked), 415 for anything but JSON, both in the
// error shape.
import http from 'node:http'
import type { AddressInfo } from 'node:net'
import { Readable } from 'node:stream'
import t, { type Test } from 'tap'
import { DEFAULT_INPUT_LIMITS, codePoints } from '../../src/api/pipeline/input-limits.ts'
import { loadConfig } from '../../src/config.ts'
import { buildTestApp, chatBody } from '../helpers/app.ts'

const URL = '/api/v1/chat/completions'
const user = (content: unknown) => ({ role: 'user', content })

function expectInvalid (t: Test, res: { statusCode: number, json: () => any }, param: string, setting: string): void {
  t.equal(res.statusCode, 400, `${param}: 400`)
  const { error } = res.json()
  t.same(Object.keys(error).sort(), ['code', 'message', 'param', 'type'])
  t.equal(error.code, 'invalid_parameter')
  t.equal(error.type, 'invalid_request_error')
  t.equal(error.param, param)
  t.match(error.message, setting, 'the message names the setting that allows more')
}

t.test('the defaults, and their variables', async t => {
  t.same(loadConfig({}).inputLimits, { maxMessages: 1024, maxMessageChars: 262144, maxContentParts: 256 })
  t.same(DEFAULT_INPUT_LIMITS, loadConfig({}).inputLimits)
  t.same(loadConfig({ MAX_MESSAGES: '5', MAX_MESSAGE_CHARS: '100', MAX_CONTENT_PARTS: '2' }).inputLimits, { maxMessages: 5, maxMessageChars: 100, maxContentParts: 2 })
  t.throws(() => loadConfig({ MAX_MESSAGES: '0' }), /MAX_MESSAGES/)
  t.throws(() => loadConfig({ MAX_MESSAGE_CHARS: 'lots' }), /MAX_MESSAGE_CHARS/)
})

t.test('default limits: at the boundary accepted, one past refused', async t => {
  const { app, auth } = await buildTestApp(t)
  const post = (patch: Record<string, unknown>) => app.inject({ method: 'POST', url: URL, headers: auth, payload: chatBody(patch) })

  t.equal((await post({ messages: Array.from({ length: 1024 }, () => user('hi')) })).statusCode, 200, '1024 messages')
  expectInvalid(t, await post({ messages: Array.from({ length: 1025 }, () => user('hi')) }), 'messages', 'MAX_MESSAGES')

  t.equal((await post({ messages: [user('x'.repeat(262144))] })).statusCode, 200, '262144 characters')
  expectInvalid(t, await post({ messages: [user('hi'), user('x'.repeat(262145))] }), 'messages[1].content', 'MAX_MESSAGE_CHARS')

  const parts = (n: number) => Array.from({ length: n }, () => ({ type: 'text', text: 'a' }))
  t.equal((await post({ messages: [user(parts(256))] })).statusCode, 200, '256 parts')
  expectInvalid(t, await post({ messages: [user(parts(257))] }), 'messages[0].content', 'MAX_CONTENT_PARTS')
})

t.test('configured limits', async t => {
  const { app, auth } = await buildTestApp(t, { env: { MAX_MESSAGES: '3', MAX_MESSAGE_CHARS: '10', MAX_CONTENT_PARTS: '2' } })
  const post = (messages: unknown[]) => app.inject({ method: 'POST', url: URL, headers: auth, payload: chatBody({ messages }) })

  t.equal((await post([user('a'), user('b'), user('c')])).statusCode, 200)
  const tooMany = await post([user('a'), user('b'), user('c'), user('d')])
  expectInvalid(t, tooMany, 'messages', 'MAX_MESSAGES')
  t.equal(tooMany.json().error.message, 'Too many messages: 4; at most 3 are accepted (MAX_MESSAGES).')

  t.equal((await post([user('0123456789')])).statusCode, 200, '10 characters')
  const long = await post([user('ok'), { role: 'system', content: '0123456789A' }])
  expectInvalid(t, long, 'messages[1].content', 'MAX_MESSAGE_CHARS')
  t.equal(long.json().error.message, 'The message is 11 characters long; at most 10 are accepted (MAX_MESSAGE_CHARS).')

  // Characters are code points: ten emoji fit (twenty UTF-16 units), eleven do not.
  t.equal((await post([user('😀'.repeat(10))])).statusCode, 200, 'ten emoji')
  expectInvalid(t, await post([user('😀'.repeat(11))]), 'messages[0].content', 'MAX_MESSAGE_CHARS')

  // Parts count toward the length joined.
  t.equal((await post([user([{ type: 'text', text: '01234' }, { type: 'text', text: '56789' }])])).statusCode, 200)
  expectInvalid(t, await post([user([{ type: 'text', text: '01234' }, { type: 'text', text: '567890' }])]), 'messages[0].content', 'MAX_MESSAGE_CHARS')
  expectInvalid(t, await post([user([{ type: 'text', text: 'a' }, { type: 'text', text: 'b' }, { type: 'text', text: 'c' }])]), 'messages[0].content', 'MAX_CONTENT_PARTS')
})

t.test('codePoints counts surrogate pairs once and lone surrogates as one each', async t => {
  t.equal(codePoints(''), 0)
  t.equal(codePoints('abc'), 3)
  t.equal(codePoints('😀😀'), 2)
  t.equal(codePoints('\uD800'), 1)
  t.equal(codePoints('\uDC00\uD800'), 2)
  t.equal(codePoints('a\uD800😀\uDFFF'), 4)
})

t.test('a body over BODY_LIMIT: 413 request_too_large in the error shape', async t => {
  const { app, auth } = await buildTestApp(t, { env: { BODY_LIMIT: '2048' } })
  const json = { ...auth, 'content-type': 'application/json' }
  const over = JSON.stringify(chatBody({ messages: [user('x'.repeat(2048))] }))
  const exact = JSON.stringify(chatBody({ messages: [user('')] }))
  const padded = exact.replace('""', `"${'x'.repeat(2048 - exact.length)}"`)
  t.equal(Buffer.byteLength(padded), 2048)
  t.equal((await app.inject({ method: 'POST', url: URL, headers: json, payload: padded })).statusCode, 200, 'exactly BODY_LIMIT bytes is accepted')

  const declared = await app.inject({ method: 'POST', url: URL, headers: json, payload: over })
  t.equal(declared.statusCode, 413)
  t.same(declared.json(), { error: { message: 'The request body is larger than the server accepts (its BODY_LIMIT setting).', type: 'invalid_request_error', param: null, code: 'request_too_large' } })

  // No Content-Length: the body arrives as a stream and is cut off at the limit.
  const streamed = await app.inject({ method: 'POST', url: URL, headers: json, payload: Readable.from([over.slice(0, 1000), over.slice(1000)]) })
  t.equal(streamed.statusCode, 413)
  t.equal(streamed.json().error.code, 'request_too_large')
})

t.test('a chunked body over BODY_LIMIT on a real connection: 413, and the server keeps serving', async t => {
  const { app, auth } = await buildTestApp(t, { env: { BODY_LIMIT: '4096' } })
  await app.listen({ port: 0, host: '127.0.0.1' })
  const { port } = app.server.address() as AddressInfo
  const res = await new Promise<{ status: number, body: string }>((resolve, reject) => {
    const req = http.request({ port, method: 'POST', path: URL, headers: { ...auth, 'content-type': 'application/json', 'transfer-encoding': 'chunked' } }, r => {
      let body = ''
      r.setEncoding('utf8').on('data', d => { body += d }).on('end', () => resolve({ status: r.statusCode!, body }))
    })
    req.on('error', reject)
    req.write('{"model":"scripted","messages":[{"role":"user","content":"')
    // Writes until the server has answered (it may close the connection before the end).
    const chunk = 'y'.repeat(1024)
    let sent = 0
    const pump = (): void => {
      while (sent < 64 && req.write(chunk)) sent++
      if (sent < 64) req.once('drain', pump)
      else req.end('"}]}')
    }
    pump()
  })
  t.equal(res.status, 413)
  t.equal(JSON.parse(res.body).error.code, 'request_too_large')
  const after = await fetch(`http://127.0.0.1:${port}${URL}`, { method: 'POST', headers: { ...auth, 'content-type': 'application/json' }, body: JSON.stringify(chatBody()) })
  t.equal(after.status, 200, 'the next request is served')
})

t.test('anything but JSON: 415 unsupported_media_type in the error shape', async t => {
  const { app, auth } = await buildTestApp(t)
  const body = JSON.stringify(chatBody())
  for (const type of ['text/plain', 'application/x-www-form-urlencoded', 'multipart/form-data; boundary=x', 'application/xml', 'application/octet-stream', 'text/json']) {
    const res = await app.inject({ method: 'POST', url: URL, headers: { ...auth, 'content-type': type }, payload: body })
    t.equal(res.statusCode, 415, type)
    t.same(res.json(), { error: { message: 'Unsupported Content-Type; send application/json.', type: 'invalid_request_error', param: null, code: 'unsupported_media_type' } }, type)
  }
  for (const type of ['application/json', 'application/json; charset=utf-8', 'Application/JSON']) {
    const res = await app.inject({ method: 'POST', url: URL, headers: { ...auth, 'content-type': type }, payload: body })
    t.equal(res.statusCode, 200, type)
  }
})
