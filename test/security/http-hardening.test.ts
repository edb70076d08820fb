// What the outside probe of issue 19 found at the HTTP level, each fixed:
// - malformed HTTP (a request line that is not HTTP, headers too large, a URL
//   with broken percent-encoding) is answered in the API's error shape;
// - HSTS only on a response to a request that came over HTTPS: directly, or
//   per X-Forwarded-Proto from a trusted proxy, as COOKIE_SECURE=auto decides;
// - /docs carries the dashboard's security headers, with a CSP that fits
//   swagger-ui's own files, and the OpenAPI document lists no dashboard page,
//   the admin pages least of all;
// - the dashboard's notice comes from a fixed list: ?done=constructor shows
//   nothing, not Object's constructor.

import net from 'node:net'
import t from 'tap'
import { buildTestApp } from '../helpers/app.ts'
import { signedUp } from './people.ts'

function rawExchange (port: number, request: string): Promise<string> {
  return new Promise(resolve => {
    let data = ''
    const socket = net.connect(port, '127.0.0.1', () => socket.write(request))
    socket.setEncoding('utf8')
    socket.on('data', chunk => { data += chunk })
    socket.on('error', () => {})
    socket.on('close', () => resolve(data))
  })
}

function errorOf (raw: string): { status: number; head: string; error: Record<string, unknown> } {
  const [head, body] = raw.split('\r\n\r\n')
  return { status: Number(/^HTTP\/1\.1 (\d+)/.exec(head)?.[1]), head, error: JSON.parse(body).error }
}

t.test('malformed HTTP is answered in the API\'s error shape', async t => {
  const { app } = await buildTestApp(t)
  await app.listen({ port: 0, host: '127.0.0.1' })
  const port = (app.server.address() as net.AddressInfo).port

  for (const [label, request, status, code] of [
    ['not HTTP at all', 'GARBAGE\r\n\r\n', 400, 'malformed_request'],
    ['a broken request line', 'GET /healthz HTTP/9.9 extra\r\n\r\n', 400, 'malformed_request'],
    ['a header with no colon', 'GET /healthz HTTP/1.1\r\nHost: chatd\r\nno colon here\r\n\r\n', 400, 'malformed_request'],
    ['conflicting body lengths', 'POST /api/v1/chat/completions HTTP/1.1\r\nHost: chatd\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n', 400, 'malformed_request'],
    ['headers larger than Node accepts', `GET /healthz HTTP/1.1\r\nHost: chatd\r\nX-Big: ${'a'.repeat(20_000)}\r\n\r\n`, 431, 'headers_too_large'],
  ] as const) {
    const raw = await rawExchange(port, request)
    const res = errorOf(raw)
    t.equal(res.status, status, `${label}: ${status}`)
    t.same(Object.keys(res.error), ['message', 'type', 'param', 'code'], `${label}: the API's shape`)
    t.match(res.error, { type: 'invalid_request_error', code, param: null }, `${label}: ${code}`)
    t.match(res.head, /\r\nContent-Type: application\/json; charset=utf-8/i, `${label}: JSON`)
    t.match(res.head, /\r\nConnection: close/i, `${label}: and the connection closed`)
  }

  for (const [label, url] of [
    ['broken percent-encoding in the path', '/api/v1/models/%E0%A4%A'],
    ['a path segment longer than the router takes', `/api/v1/models/${'m'.repeat(200)}`],
  ]) {
    const res = await app.inject({ url, headers: { authorization: 'Bearer sk-chatd-whatever' } })
    t.equal(res.statusCode, 400, `${label}: 400`)
    t.match(res.json(), { error: { type: 'invalid_request_error', code: 'malformed_request', param: null } }, `${label}: in the API's shape`)
    t.equal(res.headers['x-content-type-options'], 'nosniff', `${label}: nosniff`)
    t.notMatch(res.body, url.slice(15), `${label}: the URL is not repeated back`)
  }

  // Over a real socket, asking to keep the connection alive and sending a second
  // request behind the first: the answer says the connection is closed, it is
  // closed, and the second request is never answered.
  for (const [label, url] of [
    ['broken percent-encoding', '/api/v1/models/%E0%A4%A'],
    ['a lone percent sign', '/api/v1/models/%'],
    ['a path segment longer than the router takes', `/api/v1/models/${'m'.repeat(200)}`],
  ]) {
    const raw = await rawExchange(port, `GET ${url} HTTP/1.1\r\nHost: chatd\r\nConnection: keep-alive\r\n\r\nGET /healthz HTTP/1.1\r\nHost: chatd\r\n\r\n`)
    const res = errorOf(raw)
    t.equal(res.status, 400, `${label} on a socket: 400`)
    t.match(res.error, { code: 'malformed_request' }, `${label} on a socket: malformed_request`)
    t.match(res.head, /\r\nconnection: close/i, `${label} on a socket: Connection: close`)
    t.equal(raw.match(/HTTP\/1\.1 /g)?.length, 1, `${label} on a socket: the connection was closed after the one answer`)
  }
})

t.test('HSTS only when the request came over HTTPS, and only a trusted proxy can say so', async t => {
  const direct = await buildTestApp(t)
  for (const url of ['/api/login', '/api/v1/models', '/healthz', '/docs']) {
    t.notOk((await direct.app.inject({ url })).headers['strict-transport-security'], `${url} over plain HTTP: no HSTS`)
    const spoofed = await direct.app.inject({ url, headers: { 'x-forwarded-proto': 'https' } })
    t.notOk(spoofed.headers['strict-transport-security'], `${url}: X-Forwarded-Proto from an untrusted client is not believed`)
  }

  const proxied = await buildTestApp(t, { env: { TRUST_PROXY: '127.0.0.1' } })
  for (const url of ['/api/login', '/api/v1/models', '/healthz', '/docs']) {
    const tls = await proxied.app.inject({ url, headers: { 'x-forwarded-proto': 'https' } })
    t.equal(tls.headers['strict-transport-security'], 'max-age=31536000; includeSubDomains', `${url} behind a trusted TLS proxy: HSTS`)
    t.notOk((await proxied.app.inject({ url, headers: { 'x-forwarded-proto': 'http' } })).headers['strict-transport-security'], `${url} via the proxy over plain HTTP: none`)
    const elsewhere = await proxied.app.inject({ url, headers: { 'x-forwarded-proto': 'https' }, remoteAddress: '10.9.9.9' })
    t.notOk(elsewhere.headers['strict-transport-security'], `${url}: not from an address that is not the proxy`)
  }
})

t.test('/docs: the dashboard\'s security headers, a CSP that fits swagger-ui, and no dashboard pages listed', async t => {
  const { app } = await buildTestApp(t)
  for (const url of ['/docs', '/docs/', '/docs/json', '/docs/static/swagger-initializer.js']) {
    const res = await app.inject({ url })
    t.equal(res.statusCode, 200, `${url}: served`)
    const csp = Object.fromEntries(String(res.headers['content-security-policy']).split(';').map(d => d.trim().split(/\s+/)).map(([name, ...sources]) => [name, sources]))
    t.same(csp['default-src'], ["'none'"], `${url}: default-src 'none'`)
    t.same(csp['script-src'], ["'self'"], `${url}: scripts only from chatd`)
    t.same(csp['style-src'], ["'self'"], `${url}: styles only from chatd`)
    t.same(csp['img-src'], ["'self'", 'data:'], `${url}: images from chatd and the data: icons of swagger-ui's stylesheet`)
    t.same(csp['connect-src'], ["'self'"], `${url}: fetches (the OpenAPI document, "try it out") only to chatd`)
    t.same(csp['frame-ancestors'], ["'none'"], `${url}: never framed`)
    t.equal(res.headers['x-frame-options'], 'DENY', `${url}: X-Frame-Options`)
    t.equal(res.headers['referrer-policy'], 'no-referrer', `${url}: Referrer-Policy`)
    t.equal(res.headers['x-content-type-options'], 'nosniff', `${url}: nosniff`)
  }
  // Everything the page loads is chatd's own, so the CSP above lets it load.
  const page = (await app.inject({ url: '/docs/' })).body
  t.notMatch(page, /<script(?![^>]*\ssrc=)[^>]*>/, 'no inline script')
  t.notMatch(page, /<style[\s>]|\sstyle=/, 'no inline style')
  t.notMatch(page, /(src|href)="(https?:)?\/\//, 'nothing from another site')

  const paths = Object.keys((await app.inject({ url: '/docs/json' })).json().paths)
  t.ok(paths.includes('/api/v1/chat/completions'), 'the API is documented')
  t.same(paths.filter(p => p.startsWith('/api/') && !p.startsWith('/api/v1/')), [], 'no dashboard page is listed')
  t.notOk(paths.some(p => /admin/.test(p)), 'no admin route is listed')
})

t.test('the dashboard notice reads only its own list', async t => {
  const { app } = await buildTestApp(t)
  const ann = await signedUp(app, 'ann@example.com', 'ann password')
  for (const done of ['constructor', '__proto__', 'toString', 'hasOwnProperty', 'valueOf']) {
    const res = await ann.get(`/api?done=${done}`)
    t.equal(res.statusCode, 200, `done=${done}: the page`)
    t.notMatch(res.body, /class="notice"/, `done=${done}: no notice`)
    t.notMatch(res.body, /native code|function Object|\[object Object\]/, `done=${done}: nothing of Object's`)
  }
  t.notMatch((await ann.get('/api?done=revoked&done=password')).body, /class="notice"/, 'a repeated parameter: no notice')
  t.match((await ann.get('/api?done=revoked')).body, /class="notice"[^>]*>The key was revoked/, 'a listed notice still shows')
})
