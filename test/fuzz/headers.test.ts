// Property-based fuzzing of the headers and URL of POST
// /api/v1/chat/completions (in process, ScriptedBackend): odd Content-Types,
// Authorization headers, Content-Length and Content-Encoding claims, Accept,
// query strings with pollution keys. Every answer is in the API's error shape
// or a valid 200; none is a 5xx, a crash or a hang.

import t from 'tap'
import fc from 'fast-check'
import { buildTestApp, chatBody } from '../helpers/app.ts'
import { validBody } from '../helpers/fuzz-bodies.ts'
import { assertHolds, checkAnswer, FUZZ_SEED, fuzzRuns, prototypeIsClean, Tally, withinDeadline } from '../helpers/fuzz.ts'

const URL = '/api/v1/chat/completions'

const { app, auth, key } = await buildTestApp(t)

/** Header values light-my-request (and Node) can send: visible ASCII, space and tab, Latin-1. */
const headerText = fc.string({ unit: fc.oneof(fc.constantFrom(' ', '\t', ';', ',', '=', '"', '/', '*', '+', '\\'), fc.string({ unit: 'grapheme-ascii', minLength: 1, maxLength: 1 }), fc.constantFrom('é', '\u00ff', '\u0080')), maxLength: 40 })

const contentType = fc.oneof(
  fc.constantFrom(
    'application/json', 'application/json; charset=utf-8', 'application/json;charset=UTF-8', 'application/json; charset="utf-8"',
    'application/json; charset=latin1', 'application/json; charset=utf-16', 'APPLICATION/JSON', 'application/json ', ' application/json',
    'application/json, text/plain', 'application/json;', 'application/json; =', 'application/json; charset', 'application/jsonx',
    'application/vnd.api+json', 'application/problem+json', 'application/*', '*/*', '', 'text/plain', 'text/json', 'text/html',
    'multipart/form-data', 'multipart/form-data; boundary=----x', 'application/x-www-form-urlencoded', 'application/octet-stream',
    'application/xml', 'application/json\tcharset=utf-8', 'json', '/', ';', 'application/json; boundary=x; charset=utf-8; q=0.5'
  ),
  headerText
)

const authorization = fc.oneof(
  fc.constantFrom(
    `Bearer ${key}`, `bearer ${key}`, `BEARER ${key}`, `Bearer  ${key}`, `Bearer ${key} `, `  Bearer ${key}`, `Bearer\t${key}`,
    `Bearer ${key}x`, `Bearer ${key.slice(0, -1)}`, `Bearer ${key.toUpperCase()}`, `Bearer ${key} ${key}`, `Bearer ${key},Bearer ${key}`,
    `Basic ${Buffer.from(`user:${key}`).toString('base64')}`, `Token ${key}`, key, 'Bearer', 'Bearer ', 'bearer', '', ' ',
    'Bearer sk-chatd-', `Bearer sk-chatd-${'A'.repeat(32)}`, `Bearer sk-chatd-${'A'.repeat(31)}é`, 'Bearer null', 'Bearer undefined',
    `Bearer ${'x'.repeat(100_000)}`, `Bearer sk-chatd-${'a'.repeat(100_000)}`, `${' '.repeat(50_000)}x`, `Bearer ${' '.repeat(50_000)}x`
  ),
  headerText,
  headerText.map(s => `Bearer ${s}`)
)

const extraHeaders = fc.record({
  accept: fc.constantFrom('application/json', 'text/event-stream', '*/*', 'text/html', '', 'application/xml;q=0.9, */*;q=0.1'),
  'content-encoding': fc.constantFrom('gzip', 'br', 'deflate', 'identity', 'x-unknown', ''),
  'accept-encoding': fc.constantFrom('gzip', 'br', 'identity;q=0', '*', ''),
  'x-forwarded-for': fc.constantFrom('1.2.3.4', 'not an address', '::1, 10.0.0.1', ''),
  'x-api-key': fc.constantFrom(key, 'nope'),
  cookie: fc.constantFrom('session=x', '__proto__=1', 'a=%E0%A4%A'),
}, { requiredKeys: [] })

/** A declared Content-Length that may disagree with the body. */
const lengthClaim = fc.option(fc.oneof(fc.constantFrom('0', '1', '-1', 'abc', '1e3', '99999999999999999999', ' 12'), fc.nat({ max: 5000 }).map(String)), { freq: 4 })

const queryString = fc.constantFrom('', '?', '?stream=true', '?model=x&model=y', '?__proto__[polluted]=1', '?constructor[prototype][polluted]=1', '?a=%', '?a[b][c][d]=1', `?${'a=1&'.repeat(2000)}`)

// Half the cases carry the right key and JSON type, so the other headers reach the body parser and the route.
const request = fc.record({
  contentType: fc.option(fc.oneof(fc.constant('application/json'), contentType), { freq: 8 }),
  authorization: fc.option(fc.oneof(fc.constant(`Bearer ${key}`), authorization), { freq: 8 }),
  extra: extraHeaders,
  contentLength: lengthClaim,
  query: queryString,
  body: validBody(),
})

t.test('odd headers and URLs: the error shape or a valid 200, never a 5xx', async t => {
  const tally = new Tally()
  const started = performance.now()
  await assertHolds(t, fc.asyncProperty(request, async r => {
    const headers: Record<string, string> = { ...r.extra }
    if (r.contentType !== null) headers['content-type'] = r.contentType
    if (r.authorization !== null) headers.authorization = r.authorization
    if (r.contentLength !== null) headers['content-length'] = r.contentLength
    let res
    try {
      res = await withinDeadline(app.inject({ method: 'POST', url: URL + r.query, headers, payload: JSON.stringify(r.body) }), 15_000, 'one request')
    } catch (err) {
      // light-my-request refuses some headers itself (before the server sees them): not a server finding.
      if (/Invalid character|ERR_INVALID_CHAR|ERR_HTTP_INVALID_HEADER_VALUE/.test(String((err as Error).message) + String((err as NodeJS.ErrnoException).code))) return
      throw err
    }
    const outcome = checkAnswer(res)
    tally.add(outcome)
    if (res.statusCode === 401 && res.headers['www-authenticate'] !== 'Bearer') throw new Error('401 without WWW-Authenticate: Bearer')
  }), fuzzRuns(600))
  t.comment(`headers: ${tally.cases} cases, seed ${FUZZ_SEED}, ${((performance.now() - started) / 1000).toFixed(1)} s; ${tally}`)
  t.ok(prototypeIsClean(), 'Object.prototype untouched')
  const normal = await app.inject({ method: 'POST', url: URL, headers: auth, payload: chatBody() })
  t.equal(normal.statusCode, 200, 'a normal request still succeeds')
})
