// Usage rows that meet a database outage are kept and written when it is
// back, in order, once each; rows the database refuses for good, or that
// overflow the queue, are given up (and logged by the app) rather than
// blocking the rest; shutdown hands back what is still unwritten.

import t from 'tap'
import { UsageOutbox } from '../../src/accounts/usage-outbox.ts'
import { UsageRecords } from '../../src/accounts/usage-records.ts'
import { Accounts } from '../../src/accounts/accounts.ts'
import { openMigratedDatabase } from '../../src/store/database.ts'
import type { NewUsageRecordRow } from '../../src/store/schema.ts'

const row = (n: number): NewUsageRecordRow => ({ account_id: 1, key_prefix: 'sk-chatd-abcdef', model: 'm', prompt_tokens: n, completion_tokens: 0, status: 'completed', error_code: null, latency_ms: 1, created_at: new Date().toISOString(), request_id: `chatcmpl-${n}` })
const outage = (): Error => Object.assign(new Error('connect ECONNREFUSED 127.0.0.1:5432'), { code: 'ECONNREFUSED' })
const until = async (done: () => boolean, ms = 3000): Promise<void> => {
  const deadline = Date.now() + ms
  while (!done() && Date.now() < deadline) await new Promise(resolve => setTimeout(resolve, 5))
}

t.test('rows wait out the outage and are written in order once it ends', async t => {
  let down = true
  const written: number[] = []
  const outbox = new UsageOutbox(async r => {
    if (down) throw outage()
    written.push(r.prompt_tokens as number)
  }, { retryMs: 5, maxRetryMs: 20 })
  for (const n of [1, 2, 3]) outbox.add(row(n))
  await new Promise(resolve => setTimeout(resolve, 60))
  t.equal(outbox.size, 3, 'kept while the database is down')
  down = false
  await until(() => outbox.size === 0)
  t.same(written, [1, 2, 3], 'written once each, oldest first')
})

t.test('a row refused for good is given up; the others still go', async t => {
  const givenUp: unknown[] = []
  const written: number[] = []
  const outbox = new UsageOutbox(async r => {
    if (r.prompt_tokens === 2) throw Object.assign(new Error('violates foreign key constraint'), { code: '23503' })
    written.push(r.prompt_tokens as number)
  }, { retryMs: 1, onGiveUp: (r, reason) => givenUp.push([r.prompt_tokens, (reason as Error).message]) })
  for (const n of [1, 2, 3]) outbox.add(row(n))
  await until(() => outbox.size === 0)
  t.same(written, [1, 3])
  t.same(givenUp, [[2, 'violates foreign key constraint']])
})

t.test('a full queue gives up its oldest row; drain hands back what the database never took', async t => {
  const givenUp: number[] = []
  const outbox = new UsageOutbox(async () => { throw outage() }, { retryMs: 5, maxRows: 2, onGiveUp: r => givenUp.push(r.prompt_tokens as number) })
  for (const n of [1, 2, 3]) outbox.add(row(n))
  t.same(givenUp, [1])
  const started = Date.now()
  const left = await outbox.drain(100)
  t.ok(Date.now() - started < 1000, 'drain is bounded')
  t.same(left.map(r => r.prompt_tokens), [2, 3])
  t.equal(outbox.size, 0)
})

t.test('a row written twice under one completion id is stored once', async t => {
  const db = await openMigratedDatabase({ kind: 'sqlite', path: `${t.testdir()}/chatd.db` })
  t.teardown(() => db.destroy())
  const account = await new Accounts(db).create({ email: 'a@example.com' })
  const usage = new UsageRecords(db)
  const record = { accountId: account.id, keyPrefix: 'sk-chatd-abcdef', model: 'm', promptTokens: 3, completionTokens: 4, status: 'completed' as const, errorCode: null, latencyMs: 5, requestId: 'chatcmpl-once' }
  t.equal(await usage.record(record), 'written')
  t.equal(await usage.record(record), 'written', 'the retry of a row whose first write did commit')
  t.equal((await db.selectFrom('usage_records').selectAll().execute()).length, 1)
})
