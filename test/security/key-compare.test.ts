// Presented secrets are checked in constant time, and a wrong one says nothing
// about the right one. No timings are measured (they would be flaky and prove
// little); instead the tests watch which comparison makes each decision:
// node:crypto's timingSafeEqual is wrapped in a spy (syncBuiltinESMExports
// makes `import { timingSafeEqual } from 'node:crypto'` see the wrapper too),
// and the decision must go through it.
// - sameHash, the unit that compares SHA-256 digests, uses it, and answers
//   false (never throws) for digests of another length;
// - Accounts.authenticate finds the row by the key's public prefix, then
//   decides by comparing digests with it: a key with the right prefix and a
//   wrong secret is refused after that comparison;
// - over HTTP, such a key gets exactly the answer an unknown key gets, even
//   when the key it imitates is revoked ("revoked" is told only to the holder
//   of the real key);
// - the database holds only the key's SHA-256 and prefix;
// - the dashboard's CSRF check compares tokens with it too.

import { createHash } from 'node:crypto'
import { createRequire, syncBuiltinESMExports } from 'node:module'
import t, { type Test } from 'tap'
import { apiKeyPrefix, hashApiKey, sameHash } from '../../src/accounts/api-key-format.ts'
import { buildTestApp } from '../helpers/app.ts'
import { Browser } from '../dashboard/jar.ts'

const require = createRequire(import.meta.url)
const crypto = require('node:crypto') as typeof import('node:crypto')

/** Wraps crypto.timingSafeEqual for the rest of the test; returns the calls it saw. */
function spyOnTimingSafeEqual (t: Test): Array<[Buffer, Buffer]> {
  const original = crypto.timingSafeEqual
  const calls: Array<[Buffer, Buffer]> = []
  crypto.timingSafeEqual = (a: NodeJS.ArrayBufferView, b: NodeJS.ArrayBufferView) => {
    calls.push([Buffer.from(a.buffer, a.byteOffset, a.byteLength), Buffer.from(b.buffer, b.byteOffset, b.byteLength)])
    return original(a, b)
  }
  syncBuiltinESMExports()
  t.teardown(() => {
    crypto.timingSafeEqual = original
    syncBuiltinESMExports()
  })
  return calls
}

/** The same key with its last character changed: right prefix, wrong secret. */
const wrongSecret = (key: string): string => key.slice(0, -1) + (key.endsWith('a') ? 'b' : 'a')

t.test('sameHash compares digests with timingSafeEqual and never throws on a length mismatch', async t => {
  const calls = spyOnTimingSafeEqual(t)
  const digest = hashApiKey('sk-chatd-' + 'A'.repeat(32))
  const other = hashApiKey('sk-chatd-' + 'B'.repeat(32))
  t.equal(sameHash(digest, digest), true)
  t.equal(calls.length, 1, 'the equal pair went through timingSafeEqual')
  t.same(calls[0].map(b => b.length), [32, 32], 'as the 32 raw bytes of each digest')
  t.equal(sameHash(digest, other), false)
  t.equal(sameHash(digest, digest.slice(0, -2) + (digest.endsWith('00') ? '01' : '00')), false, 'one byte differs')
  t.equal(calls.length, 3, 'so did both unequal pairs')
  t.equal(sameHash(digest, digest.slice(0, 32)), false, 'a shorter digest is refused')
  t.equal(sameHash(digest, ''), false, 'an empty one too')
  t.equal(sameHash(digest, 'not hex at all'), false, 'and text that is not hex')
})

t.test('a key with the right prefix and a wrong secret is refused by the constant-time comparison', async t => {
  const { accounts, db, key, account } = await buildTestApp(t)
  const calls = spyOnTimingSafeEqual(t)
  const stored = (await db.selectFrom('api_keys').select(['hash', 'prefix']).where('account_id', '=', account.id).executeTakeFirstOrThrow())

  const imitation = wrongSecret(key)
  t.equal(apiKeyPrefix(imitation), apiKeyPrefix(key), 'the imitation shares the real key\'s prefix, so its row is found')
  t.same(await accounts.authenticate(imitation), { ok: false, reason: 'unknown' })
  t.equal(calls.length, 1, 'the refusal was decided by timingSafeEqual')
  t.same(calls[0].map(b => b.toString('hex')).sort(), [stored.hash, hashApiKey(imitation)].sort(), 'comparing the stored digest with the presented key\'s')

  t.match(await accounts.authenticate(key), { ok: true, account: { id: account.id } })
  t.equal(calls.length, 2, 'the real key is accepted by the same comparison')

  t.same(await accounts.authenticate(`sk-chatd-${'Z'.repeat(32)}`), { ok: false, reason: 'unknown' }, 'a prefix nobody has is unknown')
  t.same(await accounts.authenticate('sk-chatd-short'), { ok: false, reason: 'malformed' })

  // What the database holds: the digest and the public prefix, nothing the key can be rebuilt from.
  t.equal(stored.hash, createHash('sha256').update(key).digest('hex'))
  t.equal(stored.prefix, key.slice(0, 15))
  const row = JSON.stringify(await db.selectFrom('api_keys').selectAll().execute())
  t.notMatch(row, key.slice(15), 'the secret part of the key is in no column')
})

t.test('over HTTP a wrong secret gets exactly what an unknown key gets, even for a revoked key', async t => {
  const { app, accounts, key } = await buildTestApp(t)
  const call = (bearer: string) => app.inject({ url: '/api/v1/models', headers: { authorization: `Bearer ${bearer}` } })
  const unknown = await call(`sk-chatd-${'Z'.repeat(32)}`)
  const imitation = await call(wrongSecret(key))
  t.equal(unknown.statusCode, 401)
  t.equal(imitation.statusCode, 401)
  t.equal(imitation.body, unknown.body, 'the same body: nothing says the prefix exists')
  t.equal(imitation.headers['www-authenticate'], unknown.headers['www-authenticate'])

  t.ok(await accounts.revokeKey(apiKeyPrefix(key)))
  t.match((await call(key)).json(), { error: { code: 'invalid_api_key', message: /revoked/ } }, 'the real key is told it was revoked')
  const imitatingRevoked = await call(wrongSecret(key))
  t.equal(imitatingRevoked.body, unknown.body, 'an imitation of a revoked key is just unknown')
})

t.test('the dashboard\'s CSRF check compares tokens with timingSafeEqual', async t => {
  const { app } = await buildTestApp(t)
  const browser = new Browser(app)
  await browser.get('/api/login')
  const calls = spyOnTimingSafeEqual(t)
  const res = await browser.post('/api/login', { email: 'x@example.com', password: 'x', _csrf: 'forged-token' })
  t.equal(res.statusCode, 403)
  t.ok(calls.length >= 1, 'the forged token was refused by a constant-time comparison')
})
