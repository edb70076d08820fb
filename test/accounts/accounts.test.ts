// Accounts and API keys: the key format, what is stored (hash and prefix,
// never the key), authentication, revocation, and the first-start admin.

import { join } from 'node:path'
import t, { type Test } from 'tap'
import { Accounts } from '../../src/accounts/accounts.ts'
import { apiKeyPrefix, generateApiKey, hashApiKey, sameHash } from '../../src/accounts/api-key-format.ts'
import { ensureAdminAccount } from '../../src/accounts/bootstrap.ts'
import { openMigratedDatabase } from '../../src/store/database.ts'

async function setup (t: Test) {
  const db = await openMigratedDatabase({ kind: 'sqlite', path: join(t.testdir(), 'chatd.db') })
  t.teardown(() => db.destroy())
  return { db, accounts: new Accounts(db) }
}

t.test('key format', async t => {
  const keys = new Set(Array.from({ length: 200 }, generateApiKey))
  t.equal(keys.size, 200, 'no repeats')
  for (const key of keys) t.match(key, /^sk-chatd-[A-Za-z0-9]{32}$/)
  const key = [...keys][0]
  t.equal(apiKeyPrefix(key), key.slice(0, 15))
  t.match(hashApiKey(key), /^[0-9a-f]{64}$/)
  t.ok(sameHash(hashApiKey(key), hashApiKey(key)))
  t.notOk(sameHash(hashApiKey(key), hashApiKey(key + 'x')))
  t.notOk(sameHash(hashApiKey(key), 'abcd'), 'different lengths compare false, without throwing')
})

t.test('accounts: create, defaults, duplicates, lookup by email', async t => {
  const { accounts } = await setup(t)
  const a = await accounts.create({ email: ' Alice@Example.com ' })
  t.match(a, { email: 'alice@example.com', tier: 'free', isAdmin: false })
  const b = await accounts.create({ email: 'bob@example.com', tier: 'pro', isAdmin: true })
  t.match(b, { tier: 'pro', isAdmin: true })
  await t.rejects(accounts.create({ email: 'ALICE@example.com' }), { name: 'AccountError', message: /already exists/ })
  await t.rejects(accounts.create({ email: 'not-an-email' }), { name: 'AccountError', message: /not an email/ })
  t.same(await accounts.findByEmail('alice@EXAMPLE.com'), a)
  await t.rejects(accounts.getByEmail('nobody@example.com'), /no account with email nobody@example.com/)
  t.equal(await accounts.count(), 2)
})

t.test('keys: only the hash and the prefix are stored', async t => {
  const { db, accounts } = await setup(t)
  const account = await accounts.create({ email: 'a@example.com' })
  const { key, info } = await accounts.createKey(account.id, { name: 'laptop' })
  t.match(key, /^sk-chatd-[A-Za-z0-9]{32}$/)
  t.match(info, { name: 'laptop', prefix: key.slice(0, 15), lastUsedAt: null, revokedAt: null })
  const row = await db.selectFrom('api_keys').selectAll().executeTakeFirstOrThrow()
  t.equal(row.hash, hashApiKey(key))
  t.notMatch(JSON.stringify(row), key.slice(15), 'the secret part is nowhere in the row')
})

t.test('authenticate: good, unknown, malformed, revoked', async t => {
  const { accounts } = await setup(t)
  const account = await accounts.create({ email: 'a@example.com' })
  const { key } = await accounts.createKey(account.id)
  const { key: other } = await accounts.createKey(account.id, { name: 'second' })

  const ok = await accounts.authenticate(key)
  t.match(ok, { ok: true, account: { email: 'a@example.com' } })
  t.same(await accounts.authenticate(key.slice(0, -1) + (key.endsWith('A') ? 'B' : 'A')), { ok: false, reason: 'unknown' })
  t.same(await accounts.authenticate('sk-chatd-short'), { ok: false, reason: 'malformed' })
  t.same(await accounts.authenticate(`sk-chatd-${'0'.repeat(32)}`), { ok: false, reason: 'unknown' })

  t.ok(await accounts.revokeKey(apiKeyPrefix(key)))
  t.notOk(await accounts.revokeKey(apiKeyPrefix(key)), 'revoking twice reports nothing to revoke')
  t.notOk(await accounts.revokeKey('sk-chatd-nope00'))
  t.same(await accounts.authenticate(key), { ok: false, reason: 'revoked' })
  t.match(await accounts.authenticate(other), { ok: true }, 'other keys keep working')

  const list = await accounts.listKeys(account.id)
  t.equal(list.length, 2)
  t.match(list[0].revokedAt, /^\d{4}-/)
  t.equal(list[1].revokedAt, null)
  t.match(list[1].lastUsedAt, /^\d{4}-/)
})

t.test('a given key (CHATD_ADMIN_KEY) must be well formed and unused', async t => {
  const { accounts } = await setup(t)
  const account = await accounts.create({ email: 'a@example.com' })
  await t.rejects(accounts.createKey(account.id, { key: 'sk-chatd-bad' }), /sk-chatd- followed by 32/)
  const key = `sk-chatd-${'Ab1'.repeat(10)}xy`
  await accounts.createKey(account.id, { key })
  await t.rejects(accounts.createKey(account.id, { key }), /already exists/)
})

t.test('first start creates one admin, once', async t => {
  const { accounts } = await setup(t)
  const created = await ensureAdminAccount(accounts, { email: 'admin@localhost' })
  t.match(created, { email: 'admin@localhost', fromConfig: false })
  t.match(created!.key, /^sk-chatd-/)
  t.match(await accounts.authenticate(created!.key), { ok: true, account: { isAdmin: true, email: 'admin@localhost' } })
  t.equal(await ensureAdminAccount(accounts, { email: 'admin@localhost' }), null, 'not again on a database with accounts')
  t.equal(await accounts.count(), 1)
})

t.test('first start with CHATD_ADMIN_KEY uses that key', async t => {
  const { accounts } = await setup(t)
  const key = `sk-chatd-${'Zz9'.repeat(10)}q1`
  t.same(await ensureAdminAccount(accounts, { email: 'ops@example.com', key }), { email: 'ops@example.com', key, fromConfig: true })
  t.match(await accounts.authenticate(key), { ok: true, account: { isAdmin: true } })
})
