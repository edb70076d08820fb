// What the store must do identically on SQLite and PostgreSQL: the same
// migrations, the same columns and types as the code reads them, constraints,
// transactions, shared settings, and the usage aggregates the dashboard uses.

import t from 'tap'
import { sql } from 'kysely'
import { migrateToLatest } from '../../src/store/database.ts'
import { sharedSetting } from '../../src/store/settings.ts'
import { UsageRecords } from '../../src/accounts/usage-records.ts'
import { onEachDatabase } from '../helpers/databases.ts'

const now = (): string => new Date().toISOString()

onEachDatabase(t, 'migrations create every table with the same columns; running again is a no-op', async (t, db) => {
  const tables = await db.introspection.getTables()
  const columns = Object.fromEntries(tables.map(table => [table.name, table.columns.map(c => c.name)]))
  t.same(Object.keys(columns).sort(), ['accounts', 'api_keys', 'sessions', 'settings', 'stored_responses', 'usage_records'])
  t.same(columns.accounts, ['id', 'email', 'tier', 'is_admin', 'password_hash', 'created_at', 'email_skeleton'])
  t.same(columns.api_keys, ['id', 'account_id', 'name', 'prefix', 'hash', 'created_at', 'last_used_at', 'revoked_at'])
  t.same(columns.sessions, ['id', 'account_id', 'token_hash', 'created_at', 'expires_at'])
  t.same(columns.usage_records, ['id', 'account_id', 'key_prefix', 'model', 'prompt_tokens', 'completion_tokens', 'status', 'error_code', 'latency_ms', 'created_at', 'request_id'])
  t.same(columns.settings, ['name', 'value'])
  t.same(columns.stored_responses, ['seq', 'id', 'account_id', 'previous_response_id', 'model', 'created_at', 'bytes', 'response', 'input'])
  await migrateToLatest(db)
  const { rows } = await sql<{ name: string }>`SELECT name FROM kysely_migration ORDER BY name`.execute(db)
  t.same(rows.map(r => r.name), ['001-accounts-and-keys', '002-sessions-usage-settings', '003-usage-request-id', '004-normalized-emails', '005-email-skeletons', '006-stored-responses'])
})

onEachDatabase(t, 'ids, defaults, booleans and counts read back as the code expects', async (t, db) => {
  const a = await db.insertInto('accounts').values({ email: 'a@x', password_hash: null, created_at: now() }).returningAll().executeTakeFirstOrThrow()
  const b = await db.insertInto('accounts').values({ email: 'b@x', is_admin: true, password_hash: null, created_at: now() }).returningAll().executeTakeFirstOrThrow()
  t.equal(typeof a.id, 'number')
  t.equal(b.id, a.id + 1, 'auto-numbered ids')
  t.equal(a.tier, 'free')
  t.equal(Boolean(a.is_admin), false)
  t.equal(Boolean(b.is_admin), true)
  const { n } = await db.selectFrom('accounts').select(eb => eb.fn.countAll<number>().as('n')).executeTakeFirstOrThrow()
  t.equal(Number(n), 2)
})

onEachDatabase(t, 'unique constraints, cascading deletes and rolled-back transactions', async (t, db) => {
  const a = await db.insertInto('accounts').values({ email: 'a@x', password_hash: null, created_at: now() }).returningAll().executeTakeFirstOrThrow()
  await t.rejects(db.insertInto('accounts').values({ email: 'a@x', password_hash: null, created_at: now() }).execute(), /unique|duplicate/i)
  await db.insertInto('api_keys').values({ account_id: a.id, name: 'k', prefix: 'sk-chatd-abcdef', hash: '00', created_at: now(), last_used_at: null, revoked_at: null }).execute()
  await db.insertInto('sessions').values({ account_id: a.id, token_hash: 'h', created_at: now(), expires_at: now() }).execute()
  await db.insertInto('usage_records').values({ account_id: a.id, key_prefix: 'sk-chatd-abcdef', model: 'm', prompt_tokens: 1, completion_tokens: 2, status: 'completed', error_code: null, latency_ms: 3, created_at: now() }).execute()

  await t.rejects(db.transaction().execute(async trx => {
    await trx.insertInto('accounts').values({ email: 'rolled@back', password_hash: null, created_at: now() }).execute()
    throw new Error('abort')
  }), /abort/)
  t.equal(await db.selectFrom('accounts').select('id').where('email', '=', 'rolled@back').executeTakeFirst(), undefined)

  await db.deleteFrom('accounts').where('id', '=', a.id).execute()
  for (const table of ['api_keys', 'sessions', 'usage_records'] as const) {
    const { n } = await db.selectFrom(table).select(eb => eb.fn.countAll<number>().as('n')).executeTakeFirstOrThrow()
    t.equal(Number(n), 0, `${table} rows go with their account`)
  }
})

onEachDatabase(t, 'a shared setting is created once and read by everyone', async (t, db) => {
  const [first, second] = await Promise.all([
    sharedSetting(db, 'cookie_secret', () => 'from-first'),
    sharedSetting(db, 'cookie_secret', () => 'from-second'),
  ])
  t.equal(first, second, 'racing creators agree')
  t.equal(await sharedSetting(db, 'cookie_secret', () => 'later'), first)
})

onEachDatabase(t, 'usage: daily totals with empty days, billable calls, recent rows', async (t, db) => {
  const account = await db.insertInto('accounts').values({ email: 'a@x', password_hash: null, created_at: now() }).returningAll().executeTakeFirstOrThrow()
  const usage = new UsageRecords(db)
  const today = new Date()
  const yesterday = new Date(today.getTime() - 24 * 3600 * 1000)
  const old = new Date(today.getTime() - 40 * 24 * 3600 * 1000)
  const base = { accountId: account.id, keyPrefix: 'sk-chatd-abcdef', model: 'm', errorCode: null, latencyMs: 12.4 }
  await usage.record({ ...base, promptTokens: 10, completionTokens: 5, status: 'completed', at: today })
  await usage.record({ ...base, promptTokens: 7, completionTokens: 0, status: 'failed', errorCode: 'context_length_exceeded', at: today })
  await usage.record({ ...base, promptTokens: 3, completionTokens: 2, status: 'cancelled', at: yesterday })
  await usage.record({ ...base, promptTokens: 100, completionTokens: 100, status: 'completed', at: old })

  const daily = await usage.daily(account.id, 30, today)
  t.equal(daily.length, 30)
  t.equal(daily.at(-1)!.date, today.toISOString().slice(0, 10))
  t.same(daily.at(-1), { date: today.toISOString().slice(0, 10), calls: 2, prompt_tokens: 17, completion_tokens: 5, total_tokens: 22 })
  t.same(daily.at(-2), { date: yesterday.toISOString().slice(0, 10), calls: 1, prompt_tokens: 3, completion_tokens: 2, total_tokens: 5 })
  t.equal(daily.slice(0, -2).reduce((n, d) => n + d.calls, 0), 0, 'the 40-day-old row is outside the window')

  t.equal(await usage.billableCallsSince(account.id, yesterday), 2, 'completed and cancelled count; failed does not')
  t.equal(await usage.billableCallsSince(account.id, old), 3)

  const recent = await usage.recent(account.id, 2)
  t.equal(recent.length, 2)
  t.match(recent[0], { status: 'failed', errorCode: 'context_length_exceeded', promptTokens: 7, latencyMs: 12 }, 'newest first; ties by insertion')
  t.match(recent[1], { status: 'completed', promptTokens: 10 })
})
