// Dashboard accounts on both databases: registration with a password hashed by
// Argon2id, log-in checks, tiers, sessions that expire and end, and key
// revocation that can never reach another account's keys.

import t from 'tap'
import { AccountError, Accounts } from '../../src/accounts/accounts.ts'
import { apiKeyPrefix } from '../../src/accounts/api-key-format.ts'
import { ensureAdminAccount } from '../../src/accounts/bootstrap.ts'
import { hashPassword, passwordProblem, verifyPassword } from '../../src/accounts/passwords.ts'
import { Sessions, SESSIONS_PER_ACCOUNT } from '../../src/accounts/sessions.ts'
import { UsageRecords } from '../../src/accounts/usage-records.ts'
import { StoredResponses } from '../../src/responses/stored-responses.ts'
import { onEachDatabase } from '../helpers/databases.ts'

t.test('passwords: Argon2id PHC strings, rules, wrong and absent hashes', async t => {
  const hash = await hashPassword('correct horse')
  t.match(hash, /^\$argon2id\$v=19\$m=19456,t=2,p=1\$/)
  t.not(await hashPassword('correct horse'), hash, 'salted: the same password hashes differently')
  t.ok(await verifyPassword(hash, 'correct horse'))
  t.notOk(await verifyPassword(hash, 'correct horsE'))
  t.notOk(await verifyPassword(null, 'anything'), 'no hash: false, after as much work')
  t.notOk(await verifyPassword('not a phc string', 'x'), 'a corrupt hash is a mismatch, not a crash')
  t.match(passwordProblem('short'), /at least 8/)
  t.match(passwordProblem('x'.repeat(257)), /at most 256/)
  t.equal(passwordProblem('long enough'), null)
})

onEachDatabase(t, 'register, log in, change the password, set the tier', async (t, db) => {
  const accounts = new Accounts(db)
  const a = await accounts.register({ email: 'Ann@Example.com', password: 'first password' })
  t.match(a, { email: 'ann@example.com', tier: 'free', isAdmin: false })
  const row = await db.selectFrom('accounts').select('password_hash').where('id', '=', a.id).executeTakeFirstOrThrow()
  t.match(row.password_hash, /^\$argon2id\$/, 'only the hash is stored')
  await t.rejects(accounts.register({ email: 'bob@example.com', password: 'short' }), AccountError)
  t.equal(await accounts.findByEmail('bob@example.com'), undefined, 'a refused registration leaves no account')
  await t.rejects(accounts.register({ email: 'ANN@example.com', password: 'whatever123' }), /already exists/)

  t.match(await accounts.verifyLogin('ann@example.com', 'first password'), { id: a.id })
  t.equal(await accounts.verifyLogin('ann@example.com', 'wrong password'), undefined)
  t.equal(await accounts.verifyLogin('nobody@example.com', 'first password'), undefined)
  const cliAccount = await accounts.create({ email: 'cli@example.com' })
  t.equal(await accounts.verifyLogin('cli@example.com', ''), undefined, 'an account without a password cannot log in')

  await accounts.setPassword(a.id, 'second password')
  t.equal(await accounts.verifyLogin('ann@example.com', 'first password'), undefined)
  t.ok(await accounts.verifyLogin('ann@example.com', 'second password'))

  await accounts.setTier(cliAccount.id, 'pro')
  t.equal((await accounts.findById(cliAccount.id))!.tier, 'pro')
  t.same((await accounts.list()).map(x => x.email), ['ann@example.com', 'cli@example.com'])
})

onEachDatabase(t, 'sessions: the token works until it ends or expires; only its hash is stored', async (t, db) => {
  const accounts = new Accounts(db)
  const a = await accounts.register({ email: 'a@example.com', password: 'password a' })
  const sessions = new Sessions(db)
  const token = await sessions.create(a.id)
  t.match(token, /^[A-Za-z0-9_-]{43}$/)
  t.match(await sessions.account(token), { id: a.id, email: 'a@example.com' })
  const stored = await db.selectFrom('sessions').selectAll().execute()
  t.equal(stored.length, 1)
  t.notMatch(JSON.stringify(stored), token, 'the token itself is not in the table')
  t.equal(await sessions.account(token.slice(0, -1) + (token.endsWith('A') ? 'B' : 'A')), undefined)
  t.equal(await sessions.account('garbage'), undefined)

  const other = await sessions.create(a.id)
  await sessions.endAll(a.id, { keep: token })
  t.ok(await sessions.account(token), 'the session that changed the password stays')
  t.equal(await sessions.account(other), undefined, 'the others end')
  await sessions.end(token)
  t.equal(await sessions.account(token), undefined)

  const brief = new Sessions(db, { ttlMs: 1 })
  const expiring = await brief.create(a.id)
  await new Promise(resolve => setTimeout(resolve, 5))
  t.equal(await brief.account(expiring), undefined, 'expired')
  t.equal(await brief.prune(), 1)
})

onEachDatabase(t, 'sessions per account are bounded: a log-in past the bound ends that account\'s oldest, no one else\'s', async (t, db) => {
  const accounts = new Accounts(db)
  const a = await accounts.register({ email: 'a@example.com', password: 'password a' })
  const b = await accounts.register({ email: 'b@example.com', password: 'password b' })
  t.equal(SESSIONS_PER_ACCOUNT, 50, 'the documented default (docs/security.md)')
  const sessions = new Sessions(db, { perAccount: 3 })
  const bToken = await sessions.create(b.id)
  const aTokens: string[] = []
  for (let i = 0; i < 5; i++) aTokens.push(await sessions.create(a.id))
  const live = await Promise.all(aTokens.map(token => sessions.account(token)))
  t.same(live.map(account => account?.id), [undefined, undefined, a.id, a.id, a.id], 'the newest three stay; the two oldest ended')
  t.match(await sessions.account(bToken), { id: b.id }, 'another account\'s session is untouched')
  const rows = await db.selectFrom('sessions').select(['account_id']).execute()
  t.equal(rows.filter(row => row.account_id === a.id).length, 3, 'the ended ones are deleted, not kept')

  // Made at the same moment (two replicas, say), the bound still holds once both are in.
  await Promise.all([sessions.create(a.id), sessions.create(a.id)])
  t.equal((await db.selectFrom('sessions').select('id').where('account_id', '=', a.id).execute()).length, 3)
})

onEachDatabase(t, 'deleting an account takes everything it holds with it, and nothing of another account\'s', async (t, db) => {
  const accounts = new Accounts(db)
  const sessions = new Sessions(db)
  const usage = new UsageRecords(db)
  const stored = new StoredResponses(db)
  const fill = async (email: string) => {
    const account = await accounts.register({ email, password: 'a password' })
    const { key } = await accounts.createKey(account.id, { name: 'k' })
    const session = await sessions.create(account.id)
    await usage.record({ accountId: account.id, keyPrefix: apiKeyPrefix(key), model: 'm', promptTokens: 1, completionTokens: 1, status: 'completed', errorCode: null, latencyMs: 1 })
    await stored.save({ id: `resp_${account.id}`, accountId: account.id, previousResponseId: null, model: 'm', createdAt: 1, response: { output: [] }, input: [] })
    return { account, key, session }
  }
  const a = await fill('a@example.com')
  const b = await fill('b@example.com')
  const rowsOf = async (accountId: number) => ({
    keys: (await db.selectFrom('api_keys').select('id').where('account_id', '=', accountId).execute()).length,
    sessions: (await db.selectFrom('sessions').select('id').where('account_id', '=', accountId).execute()).length,
    usage: (await db.selectFrom('usage_records').select('id').where('account_id', '=', accountId).execute()).length,
    days: (await db.selectFrom('usage_daily').select('day').where('account_id', '=', accountId).execute()).length,
    responses: (await db.selectFrom('stored_responses').select('id').where('account_id', '=', accountId).execute()).length,
  })
  t.same(await rowsOf(a.account.id), { keys: 1, sessions: 1, usage: 1, days: 1, responses: 1 })

  t.equal(await accounts.delete(a.account.id), true)
  t.same(await rowsOf(a.account.id), { keys: 0, sessions: 0, usage: 0, days: 0, responses: 0 })
  t.match(await accounts.authenticate(a.key), { ok: false, reason: 'unknown' })
  t.equal(await sessions.account(a.session), undefined)
  t.equal(await accounts.delete(a.account.id), false, 'deleting it again finds nothing')
  // A request of the deleted account that was still running ends now: its usage row, whose account
  // is gone, fails alone; another account's row written in the same commit is kept.
  const row = (accountId: number) => ({ accountId, keyPrefix: 'sk-chatd-abcdef', model: 'm', promptTokens: 1, completionTokens: 1, status: 'completed' as const, errorCode: null, latencyMs: 1 })
  const [lost, kept] = await Promise.allSettled([usage.record(row(a.account.id)), usage.record(row(b.account.id))])
  t.equal(lost.status, 'rejected', 'the deleted account\'s row is refused')
  t.equal(kept.status, 'fulfilled', 'the other account\'s row, in the same commit, is written')

  t.same(await rowsOf(b.account.id), { keys: 1, sessions: 1, usage: 2, days: 1, responses: 1 }, 'the other account keeps all of its own')
  t.match(await accounts.authenticate(b.key), { ok: true, account: { id: b.account.id } })
  // The newest account deleted, its id is still never given again (a reused id would inherit what
  // is kept under it elsewhere: limit counters, a prefix cache scope).
  const c = await accounts.register({ email: 'c@example.com', password: 'a password' })
  await accounts.delete(c.id)
  const again = await accounts.register({ email: 'c@example.com', password: 'another password' })
  t.ok(again.id > c.id, `the email registers again, under an id never used before (${again.id} after ${c.id})`)
})

onEachDatabase(t, 'an account can revoke only its own keys', async (t, db) => {
  const accounts = new Accounts(db)
  const a = await accounts.create({ email: 'a@example.com' })
  const b = await accounts.create({ email: 'b@example.com' })
  const { key: bKey } = await accounts.createKey(b.id, { name: 'b key' })
  t.notOk(await accounts.revokeKey(apiKeyPrefix(bKey), { accountId: a.id }), 'A cannot revoke B\'s key')
  t.match(await accounts.authenticate(bKey), { ok: true, keyPrefix: apiKeyPrefix(bKey) })
  t.ok(await accounts.revokeKey(apiKeyPrefix(bKey), { accountId: b.id }))
  t.match(await accounts.authenticate(bKey), { ok: false, reason: 'revoked' })
})

onEachDatabase(t, 'first start: the admin is on the unlimited tier; replicas racing create one', async (t, db) => {
  const accounts = new Accounts(db)
  const results = await Promise.all([
    ensureAdminAccount(accounts, { email: 'admin@localhost' }),
    ensureAdminAccount(accounts, { email: 'admin@localhost' }),
  ])
  t.equal(results.filter(r => r !== null).length, 1, 'one of them made it; the other found it made')
  t.equal(await accounts.count(), 1)
  t.match(await accounts.findByEmail('admin@localhost'), { isAdmin: true, tier: 'unlimited' })
})
