// Bearer keys: missing, malformed, unknown and revoked keys get 401 before the
// body is even looked at; a good key works and is stamped as used.

import t from 'tap'
import { buildTestApp, chatBody } from '../helpers/app.ts'

const URL = '/api/v1/chat/completions'

t.test('401 for missing, malformed, unknown and revoked keys', async t => {
  const { app, accounts, key } = await buildTestApp(t)
  const call = (headers: Record<string, string>, payload: unknown = chatBody()) =>
    app.inject({ method: 'POST', url: URL, headers, payload: payload as Record<string, unknown> })

  const missing = await call({})
  t.equal(missing.statusCode, 401)
  t.same(missing.json().error, { message: missing.json().error.message, type: 'authentication_error', param: null, code: 'missing_api_key' })
  t.equal(missing.headers['www-authenticate'], 'Bearer')

  const cases: Array<[string, string]> = [
    ['empty bearer', 'Bearer '],
    ['wrong scheme', `Basic ${key}`],
    ['no scheme', key],
    ['two tokens', `Bearer ${key} extra`],
    ['not a chatd key', 'Bearer sk-proj-abcdef'],
    ['right shape, unknown key', `Bearer sk-chatd-${'A'.repeat(32)}`],
    ['right prefix, wrong rest', `Bearer ${key.slice(0, 15)}${'z'.repeat(26)}`],
    ['key with a character changed', `Bearer ${key.slice(0, -1)}${key.endsWith('a') ? 'b' : 'a'}`],
  ]
  for (const [name, header] of cases) {
    const res = await call({ authorization: header })
    t.equal(res.statusCode, 401, name)
    t.equal(res.json().error.code, header.trim() === 'Bearer' ? 'missing_api_key' : 'invalid_api_key', name)
    t.equal(res.json().error.type, 'authentication_error', name)
  }

  t.equal((await call({ authorization: `Bearer ${key}` })).statusCode, 200, 'the real key works')
  t.equal((await call({ authorization: `bearer  ${key}` })).statusCode, 200, 'scheme is case-insensitive')

  t.ok(await accounts.revokeKey(key.slice(0, 15)))
  const revoked = await call({ authorization: `Bearer ${key}` })
  t.equal(revoked.statusCode, 401)
  t.equal(revoked.json().error.code, 'invalid_api_key')
  t.match(revoked.json().error.message, /revoked/)
})

t.test('auth runs before body parsing and validation', async t => {
  const { app } = await buildTestApp(t)
  const res = await app.inject({ method: 'POST', url: URL, headers: { 'content-type': 'application/json' }, payload: '{not json' })
  t.equal(res.statusCode, 401)
  t.equal(res.json().error.code, 'missing_api_key')
})

t.test('every /api/v1 endpoint needs a key; health, metrics and docs do not', async t => {
  const { app, auth } = await buildTestApp(t)
  for (const url of ['/api/v1/models', '/api/v1/models/scripted']) {
    t.equal((await app.inject({ url })).statusCode, 401, url)
    t.equal((await app.inject({ url, headers: auth })).statusCode, 200, url)
  }
  for (const url of ['/healthz', '/readyz', '/metrics', '/docs/json']) {
    t.equal((await app.inject({ url })).statusCode, 200, url)
  }
})

t.test('a successful call records last use of the key', async t => {
  const { app, accounts, auth } = await buildTestApp(t)
  const account = await accounts.getByEmail('user@example.com')
  t.equal((await accounts.listKeys(account.id))[0].lastUsedAt, null)
  await app.inject({ url: '/api/v1/models', headers: auth })
  t.match((await accounts.listKeys(account.id))[0].lastUsedAt, /^\d{4}-\d\d-\d\dT/)
})

t.test('the key never reaches the logs', async t => {
  const { buildApp } = await import('../../src/app.ts')
  const { Writable } = await import('node:stream')
  const base = await buildTestApp(t)
  let logged = ''
  const logStream = new Writable({ write (chunk, _enc, cb) { logged += chunk.toString(); cb() } })
  const app = await buildApp({ config: { ...base.config, logLevel: 'trace' }, accounts: base.accounts, models: base.models, logStream })
  t.teardown(() => app.close())
  await app.inject({ method: 'POST', url: URL, headers: base.auth, payload: chatBody() })
  await app.inject({ method: 'POST', url: URL, headers: { authorization: `Bearer ${base.key}x` }, payload: chatBody() })
  // Whatever code logs a request's headers gets them redacted.
  app.log.info({ req: { headers: { authorization: base.auth.authorization, cookie: 'sid=1' } } }, 'headers')
  app.log.info({ headers: { authorization: base.auth.authorization } }, 'bare headers')
  t.match(logged, 'incoming request', 'requests are logged')
  t.match(logged, '[Redacted]')
  t.notMatch(logged, base.key.slice(9), 'no trace of the key')
})
