// What one account may create at /api: at most KEYS_PER_ACCOUNT active keys and
// KEYS_PER_ACCOUNT_PER_DAY new ones in 24 hours, on both databases; the operator's
// keys (no allowance) are not bounded; the dashboard's list stays the same size
// however many keys an account has revoked. Before these bounds one session made
// ~470 keys a second, and the home page listed every one (1.9 MB at 3,000).

import t from 'tap'
import { Accounts, KeyAllowanceError } from '../../src/accounts/accounts.ts'
import { onEachDatabase } from '../helpers/databases.ts'

const DAY_MS = 24 * 3600 * 1000

onEachDatabase(t, 'active keys are bounded per account; revoking one makes room', async (t, db) => {
  const accounts = new Accounts(db)
  const ann = await accounts.create({ email: 'ann@example.com' })
  const bob = await accounts.create({ email: 'bob@example.com' })
  const allowance = { active: 3, perDay: 10 }
  const made = []
  for (let i = 0; i < 3; i++) made.push(await accounts.createKey(ann.id, { name: `k${i}`, allowance }))
  await t.rejects(accounts.createKey(ann.id, { name: 'k3', allowance }), { name: 'KeyAllowanceError', statusCode: 409, message: /at most 3 active keys\. Revoke one/ })
  t.equal((await accounts.listKeys(ann.id)).length, 3, 'the refused key was not stored')

  t.ok(await accounts.createKey(bob.id, { name: 'bob', allowance }), 'another account\'s keys do not count against this one')
  t.ok(await accounts.createKey(ann.id, { name: 'by the operator' }), 'without an allowance (chatd keys create) nothing is bounded')
  await accounts.revokeKey(made[0].info.prefix)
  await accounts.revokeKey((await accounts.listKeys(ann.id)).at(-1)!.prefix)
  t.ok(await accounts.createKey(ann.id, { name: 'k4', allowance }), 'a revoked key frees its place')
})

onEachDatabase(t, 'keys made in 24 hours are bounded, revoked ones included; older ones do not count', async (t, db) => {
  const accounts = new Accounts(db)
  const ann = await accounts.create({ email: 'ann@example.com' })
  const allowance = { active: 100, perDay: 4 }
  for (let i = 0; i < 4; i++) {
    const { info } = await accounts.createKey(ann.id, { name: `k${i}`, allowance })
    await accounts.revokeKey(info.prefix)
  }
  const refusal = await accounts.createKey(ann.id, { name: 'k4', allowance }).catch((err: unknown) => err)
  t.type(refusal, KeyAllowanceError)
  t.equal((refusal as KeyAllowanceError).statusCode, 429)
  t.match((refusal as Error).message, /at most 4 keys in 24 hours \(revoked ones count\)\. The next one can be created from \d{4}-\d\d-\d\d \d\d:\d\d UTC\./)
  const oldest = (await accounts.listKeys(ann.id))[0]
  const expected = new Date(Date.parse(oldest.createdAt) + DAY_MS).toISOString().slice(0, 16).replace('T', ' ')
  t.match((refusal as Error).message, expected, 'when the oldest of them turns a day old')

  // A day later (the two oldest made 25 hours ago), two more may be made, and not a third.
  const dayAndHourAgo = new Date(Date.now() - DAY_MS - 3600_000).toISOString()
  const keys = await accounts.listKeys(ann.id)
  await db.updateTable('api_keys').set({ created_at: dayAndHourAgo }).where('id', 'in', [keys[0].id, keys[1].id]).execute()
  t.ok(await accounts.createKey(ann.id, { name: 'k5', allowance }))
  t.ok(await accounts.createKey(ann.id, { name: 'k6', allowance }))
  await t.rejects(accounts.createKey(ann.id, { name: 'k7', allowance }), { name: 'KeyAllowanceError', statusCode: 429 })
})

onEachDatabase(t, 'the dashboard\'s list: every active key and the 20 latest revoked, newest first, the rest counted', async (t, db) => {
  const accounts = new Accounts(db)
  const ann = await accounts.create({ email: 'ann@example.com' })
  const prefixes: string[] = []
  for (let i = 0; i < 26; i++) prefixes.push((await accounts.createKey(ann.id, { name: `k${i}` })).info.prefix)
  // k0..k22 revoked, k23..k25 active.
  for (const prefix of prefixes.slice(0, 23)) await accounts.revokeKey(prefix)
  const listing = await accounts.listKeysForPage(ann.id, 20)
  t.same(listing.keys.map(k => k.name), Array.from({ length: 23 }, (_, i) => `k${25 - i}`), 'newest first: 3 active, then the 20 latest revoked')
  t.equal(listing.olderRevoked, 3, 'k0, k1 and k2 are counted, not listed')
  t.same((await accounts.listKeysForPage(ann.id, 50)).olderRevoked, 0)
})
