// What the store must do identically on SQLite and PostgreSQL: the same
// migrations, the same columns and types as the code reads them, constraints,
// transactions, shared settings, and the usage aggregates the dashboard uses.

import t from 'tap'
import { Migrator, sql, type Kysely } from 'kysely'
import { migrateToLatest, openDatabase } from '../../src/store/database.ts'
import { migrations } from '../../src/store/migrations/index.ts'
import { sharedSetting } from '../../src/store/settings.ts'
import { UsageRecords, UsageRetention } from '../../src/accounts/usage-records.ts'
import { onEachDatabase, testDatabase } from '../helpers/databases.ts'

const now = (): string => new Date().toISOString()
const DAY_MS = 24 * 3600 * 1000

onEachDatabase(t, 'migrations create every table with the same columns; running again is a no-op', async (t, db) => {
  const tables = await db.introspection.getTables()
  const columns = Object.fromEntries(tables.map(table => [table.name, table.columns.map(c => c.name)]))
  t.same(Object.keys(columns).sort(), ['accounts', 'api_keys', 'sessions', 'settings', 'stored_responses', 'usage_daily', 'usage_records'])
  t.same(columns.accounts, ['id', 'email', 'tier', 'is_admin', 'password_hash', 'created_at', 'email_skeleton'])
  t.same(columns.api_keys, ['id', 'account_id', 'name', 'prefix', 'hash', 'created_at', 'last_used_at', 'revoked_at'])
  t.same(columns.sessions, ['id', 'account_id', 'token_hash', 'created_at', 'expires_at'])
  t.same(columns.usage_records, ['id', 'account_id', 'key_prefix', 'model', 'prompt_tokens', 'completion_tokens', 'status', 'error_code', 'latency_ms', 'created_at', 'request_id'])
  t.same(columns.usage_daily, ['account_id', 'day', 'calls', 'billable_calls', 'prompt_tokens', 'completion_tokens'])
  t.same(columns.settings, ['name', 'value'])
  t.same(columns.stored_responses, ['seq', 'id', 'account_id', 'previous_response_id', 'model', 'created_at', 'bytes', 'response', 'input'])
  await migrateToLatest(db)
  const { rows } = await sql<{ name: string }>`SELECT name FROM kysely_migration ORDER BY name`.execute(db)
  t.same(rows.map(r => r.name), ['001-accounts-and-keys', '002-sessions-usage-settings', '003-usage-request-id', '004-normalized-emails', '005-email-skeletons', '006-stored-responses', '007-usage-daily'])
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
  await new UsageRecords(db).record({ accountId: a.id, keyPrefix: 'sk-chatd-abcdef', model: 'm', promptTokens: 1, completionTokens: 2, status: 'completed', errorCode: null, latencyMs: 3 })

  await t.rejects(db.transaction().execute(async trx => {
    await trx.insertInto('accounts').values({ email: 'rolled@back', password_hash: null, created_at: now() }).execute()
    throw new Error('abort')
  }), /abort/)
  t.equal(await db.selectFrom('accounts').select('id').where('email', '=', 'rolled@back').executeTakeFirst(), undefined)

  await db.deleteFrom('accounts').where('id', '=', a.id).execute()
  for (const table of ['api_keys', 'sessions', 'usage_records', 'usage_daily'] as const) {
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
  const midnight = (d: Date) => new Date(d.toISOString().slice(0, 10) + 'T00:00:00.000Z')
  t.equal(await usage.billableCallsSince(account.id, midnight(yesterday)), 2, 'from a midnight (a month\'s start), the days\' totals answer the same')
  t.equal(await usage.billableCallsSince(account.id, midnight(old)), 3)
  t.equal(await usage.billableCallsSince(account.id, midnight(new Date(today.getTime() + 24 * 3600 * 1000))), 0)

  // A retried row (the same request id) is one call, in the records and in the day's totals.
  await usage.record({ ...base, promptTokens: 1, completionTokens: 1, status: 'completed', at: today, requestId: 'chatcmpl-once' })
  await usage.record({ ...base, promptTokens: 1, completionTokens: 1, status: 'completed', at: today, requestId: 'chatcmpl-once' })
  t.same((await usage.daily(account.id, 30, today)).at(-1), { date: today.toISOString().slice(0, 10), calls: 3, prompt_tokens: 18, completion_tokens: 6, total_tokens: 24 })

  const recent = await usage.recent(account.id, 3)
  t.equal(recent.length, 3)
  t.match(recent[0], { status: 'completed', promptTokens: 1 }, 'newest first; ties by insertion')
  t.match(recent[1], { status: 'failed', errorCode: 'context_length_exceeded', promptTokens: 7, latencyMs: 12 })
  t.match(recent[2], { status: 'completed', promptTokens: 10 })
})

onEachDatabase(t, 'usage records older than USAGE_RECORDS_RETENTION_DAYS are removed in batches; the day totals keep counting them', async (t, db) => {
  const [a, b] = await Promise.all(['a@x', 'b@x'].map(email => db.insertInto('accounts').values({ email, password_hash: null, created_at: now() }).returning('id').executeTakeFirstOrThrow()))
  const usage = new UsageRecords(db)
  const today = new Date()
  const daysAgo = (n: number) => new Date(today.getTime() - n * DAY_MS)
  const record = (accountId: number, at: Date) => usage.record({ accountId, keyPrefix: 'sk-chatd-abcdef', model: 'm', promptTokens: 2, completionTokens: 3, status: 'completed', errorCode: null, latencyMs: 1, at })
  for (let i = 0; i < 5; i++) await record(i % 2 === 0 ? a.id : b.id, daysAgo(40))
  await record(a.id, daysAgo(20))
  await record(b.id, today)
  const totalsBefore = await usage.daily(a.id, 60, today)

  const job = new UsageRetention(usage, { retentionDays: 30, batch: 2, now: () => today })
  t.equal(await job.runOnce(), 5, 'batch after batch, any account\'s, until none is left')
  const left = await db.selectFrom('usage_records').select(['account_id', 'created_at']).orderBy('id').execute()
  t.same(left.map(r => r.created_at), [daysAgo(20).toISOString(), today.toISOString()], 'the younger records stay')
  t.same(await usage.daily(a.id, 60, today), totalsBefore, 'the usage report and chart still count the removed records')
  t.equal(await usage.billableCallsSince(a.id, new Date(daysAgo(45).toISOString().slice(0, 10) + 'T00:00:00.000Z')), 4, 'and so does the allowance')
  t.equal(await job.runOnce(), 0)
  t.equal(await new UsageRetention(usage, { retentionDays: 0, now: () => new Date(today.getTime() + 1000 * DAY_MS) }).runOnce(), 0, '0 keeps everything')
  t.equal((await db.selectFrom('usage_records').select('id').execute()).length, 2)

  // A record written out of order (a younger one before older ones) holds the job back a batch
  // at a time, never for good, and is itself kept.
  await record(a.id, today)
  for (let i = 0; i < 3; i++) await record(b.id, daysAgo(40))
  const sweep = new UsageRetention(usage, { retentionDays: 10, batch: 3, now: () => today })
  let removed = 0
  for (let run = 0; run < 5; run++) removed += await sweep.runOnce()
  t.equal(removed, 4, 'the 20-day-old record and the three 40-day-old ones')
  t.same((await db.selectFrom('usage_records').select('created_at').execute()).map(r => r.created_at), [today.toISOString(), today.toISOString()])
})

onEachDatabase(t, 'two replicas removing expired usage records together delete each once, without errors', async (t, db) => {
  const account = await db.insertInto('accounts').values({ email: 'a@x', password_hash: null, created_at: now() }).returning('id').executeTakeFirstOrThrow()
  const old = '2025-01-01T00:00:00.000Z'
  const rows = Array.from({ length: 600 }, () => ({ account_id: account.id, key_prefix: 'sk-chatd-abcdef', model: 'm', prompt_tokens: 1, completion_tokens: 1, status: 'completed' as const, error_code: null, latency_ms: 1, created_at: old }))
  for (let i = 0; i < rows.length; i += 200) await db.insertInto('usage_records').values(rows.slice(i, i + 200)).execute()
  const replica = () => new UsageRetention(new UsageRecords(db), { retentionDays: 30, batch: 50 })
  const [one, two] = await Promise.all([replica().runOnce(), replica().runOnce()])
  const left = (await db.selectFrom('usage_records').select('id').execute()).length
  t.equal(one + two + left, 600, `deleted ${one} + ${two}, ${left} left for the next run`)
  t.equal(await replica().runOnce(), left)
  t.equal((await db.selectFrom('usage_records').select('id').execute()).length, 0)
})

for (const kind of ['sqlite', 'postgres'] as const) {
  t.test(`migration 007 totals the usage already recorded per account and day [${kind}]`, async t => {
    const where = await testDatabase(t, kind)
    if (where === undefined) return
    const db = openDatabase(where)
    t.teardown(() => db.destroy())
    const { error } = await new Migrator({ db, provider: { getMigrations: async () => migrations } }).migrateTo('006-stored-responses')
    if (error) throw error
    const legacy = db as Kysely<any>
    const [a, b] = await Promise.all(['a@x', 'b@x'].map(async email => (await legacy.insertInto('accounts').values({ email, password_hash: null, created_at: now() }).returning('id').executeTakeFirstOrThrow()).id as number))
    const row = (account: number, at: string, status: string, prompt: number, completion: number) =>
      ({ account_id: account, key_prefix: 'sk-chatd-abcdef', model: 'm', prompt_tokens: prompt, completion_tokens: completion, status, error_code: null, latency_ms: 1, created_at: at })
    const today = new Date().toISOString().slice(0, 10)
    await legacy.insertInto('usage_records').values([
      row(a, `${today}T01:00:00.000Z`, 'completed', 10, 5),
      row(a, `${today}T23:59:59.999Z`, 'failed', 7, 0),
      row(a, '2026-01-31T12:00:00.000Z', 'cancelled', 3, 2),
      row(b, `${today}T02:00:00.000Z`, 'completed', 1, 1),
    ]).execute()
    await migrateToLatest(db)

    const days = await db.selectFrom('usage_daily').selectAll().orderBy('account_id').orderBy('day').execute()
    t.same(days.map(d => ({ ...d, calls: Number(d.calls), billable_calls: Number(d.billable_calls), prompt_tokens: Number(d.prompt_tokens), completion_tokens: Number(d.completion_tokens) })), [
      { account_id: a, day: '2026-01-31', calls: 1, billable_calls: 1, prompt_tokens: 3, completion_tokens: 2 },
      { account_id: a, day: today, calls: 2, billable_calls: 1, prompt_tokens: 17, completion_tokens: 5 },
      { account_id: b, day: today, calls: 1, billable_calls: 1, prompt_tokens: 1, completion_tokens: 1 },
    ])
    const usage = new UsageRecords(db)
    t.same((await usage.daily(a, 30)).at(-1), { date: today, calls: 2, prompt_tokens: 17, completion_tokens: 5, total_tokens: 22 }, 'the dashboard reads what was recorded before')
    t.equal(await usage.billableCallsSince(a, new Date('2026-01-01T00:00:00.000Z')), 2)
    // What is recorded after the migration adds to the same day.
    await usage.record({ accountId: a, keyPrefix: 'sk-chatd-abcdef', model: 'm', promptTokens: 1, completionTokens: 1, status: 'completed', errorCode: null, latencyMs: 1 })
    t.same((await usage.daily(a, 30)).at(-1), { date: today, calls: 3, prompt_tokens: 18, completion_tokens: 6, total_tokens: 24 })
  })
}
