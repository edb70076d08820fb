// The stored-responses store on SQLite and PostgreSQL: responses read back
// exactly, conversations in order, per-account isolation, deletion breaking a
// conversation, the per-account cap, the byte caps, the bound on how far back
// a conversation reaches (a hostile cycle included), restarts, and retention.

import t from 'tap'
import type { Test } from 'tap'
import { ApiError } from '../../src/errors.ts'
import { DEFAULT_STORED_RESPONSE_LIMITS, type StoredResponseLimits } from '../../src/config.ts'
import { MAX_EARLIER_RESPONSES, StoredResponses, type StoredResponseRecord } from '../../src/responses/stored-responses.ts'
import { ResponseRetention } from '../../src/responses/retention.ts'
import { openMigratedDatabase, type Db } from '../../src/store/database.ts'
import { onEachDatabase, testDatabase } from '../helpers/databases.ts'

const DAY_MS = 24 * 3600 * 1000

async function account (db: Db, email: string): Promise<number> {
  const row = await db.insertInto('accounts').values({ email, password_hash: null, created_at: new Date().toISOString() }).returning('id').executeTakeFirstOrThrow()
  return row.id
}

/** A turn: one user message in, one assistant message (or what `output` says) out. */
function turn (accountId: number, id: string, previous: string | null, extra: { output?: Array<Record<string, unknown>>; text?: string } = {}): StoredResponseRecord {
  const output = extra.output ?? [{ id: `msg_out_${id}`, type: 'message', role: 'assistant', status: 'completed', content: [{ type: 'output_text', text: `answer of ${id}`, annotations: [] }] }]
  return {
    id,
    accountId,
    previousResponseId: previous,
    model: 'scripted',
    createdAt: 1_700_000_000,
    response: { id, object: 'response', created_at: 1_700_000_000, status: 'completed', model: 'scripted', previous_response_id: previous, output, usage: { input_tokens: 3, output_tokens: 4, total_tokens: 7 } },
    input: [{ id: `msg_in_${id}`, type: 'message', role: 'user', content: [{ type: 'input_text', text: extra.text ?? `question of ${id}` }] }],
  }
}

/** A row as save() writes one, for tests that need many quickly. */
function bareRow (accountId: number, id: string, previous: string | null, at = new Date()) {
  return { id, account_id: accountId, previous_response_id: previous, model: 'm', created_at: at.toISOString(), bytes: 40, response: '{}', input: '[]' }
}

function ids (items: Array<Record<string, unknown>> | undefined): unknown[] | undefined {
  return items?.map(item => item.id)
}

function limits (over: Partial<StoredResponseLimits>): StoredResponseLimits {
  return { ...DEFAULT_STORED_RESPONSE_LIMITS, ...over }
}

onEachDatabase(t, 'a response reads back exactly; a conversation is every turn\'s input then output, oldest first', async (t, db) => {
  const a = await account(db, 'a@x')
  const store = new StoredResponses(db)
  const first = turn(a, 'resp_1', null, { text: 'héllo \u0000 "quoted" \ud83d\ude00 <script>' })
  // A turn that called a function, and the next that sends its output back.
  const second = turn(a, 'resp_2', 'resp_1', { output: [{ id: 'rs_2', type: 'reasoning', summary: [], encrypted_content: 'sealed' }, { id: 'fc_2', type: 'function_call', call_id: 'call_2', name: 'get_weather', arguments: '{"city":"Paris"}', status: 'completed' }] })
  const third = { ...turn(a, 'resp_3', 'resp_2'), input: [{ id: 'fco_3', type: 'function_call_output', call_id: 'call_2', output: '{"temp":21}' }] }
  for (const r of [first, second, third]) await store.save(r)

  t.same(JSON.parse((await store.get(a, 'resp_1'))!), first.response, 'the response object as it was returned')
  t.equal(await store.get(a, 'resp_1'), JSON.stringify(first.response), 'the same JSON text')
  t.same(ids(await store.chain(a, 'resp_3')), ['msg_in_resp_1', 'msg_out_resp_1', 'msg_in_resp_2', 'rs_2', 'fc_2', 'fco_3', 'msg_out_resp_3'])
  t.same(ids(await store.chain(a, 'resp_1')), ['msg_in_resp_1', 'msg_out_resp_1'])
  const items = (await store.chain(a, 'resp_3'))!
  t.same(items[0], first.input[0], 'items are whole, unicode and control characters included')
  t.same(items[4], (second.response.output as unknown[])[1], 'a function call keeps its call_id, name and arguments')
  t.same(ids(await store.inputItems(a, 'resp_3')), ['msg_in_resp_1', 'msg_out_resp_1', 'msg_in_resp_2', 'rs_2', 'fc_2', 'fco_3'], 'input items: what the model saw, without its own output')
  t.equal(await store.chain(a, 'resp_missing'), undefined)
  t.equal(await store.inputItems(a, 'resp_missing'), undefined)

  await store.save(first) // a second save of the same id (a retry) changes nothing
  t.equal(await store.count(a), 3)
})

onEachDatabase(t, 'another account\'s response is not found, and cannot be deleted or continued', async (t, db) => {
  const a = await account(db, 'a@x')
  const b = await account(db, 'b@x')
  const store = new StoredResponses(db)
  await store.save(turn(a, 'resp_a1', null))
  await store.save(turn(a, 'resp_a2', 'resp_a1'))
  t.equal(await store.get(b, 'resp_a1'), undefined)
  t.equal(await store.chain(b, 'resp_a2'), undefined)
  t.equal(await store.inputItems(b, 'resp_a2'), undefined)
  t.equal(await store.delete(b, 'resp_a1'), false)
  t.ok(await store.get(a, 'resp_a1'), 'still there for its owner')
  // A response of b's that claims to continue a's conversation does not reach into it.
  await store.save(turn(b, 'resp_b1', 'resp_a2'))
  t.equal(await store.chain(b, 'resp_b1'), undefined, 'the link to another account\'s response is a broken link')
  t.same(ids(await store.inputItems(b, 'resp_b1')), ['msg_in_resp_b1'], 'its input items are its own only')
})

onEachDatabase(t, 'deleting a response in the middle breaks the conversations through it', async (t, db) => {
  const a = await account(db, 'a@x')
  const store = new StoredResponses(db)
  for (const [id, prev] of [['resp_1', null], ['resp_2', 'resp_1'], ['resp_3', 'resp_2']] as const) await store.save(turn(a, id, prev))
  t.equal(await store.delete(a, 'resp_2'), true)
  t.equal(await store.delete(a, 'resp_2'), false, 'deleted once')
  t.equal(await store.get(a, 'resp_2'), undefined)
  t.equal(await store.chain(a, 'resp_3'), undefined, 'continuing through a deleted response: not found')
  t.ok(await store.get(a, 'resp_3'), 'a later response itself is still retrievable')
  t.same(ids(await store.inputItems(a, 'resp_3')), ['msg_in_resp_3'], 'its input items stop at the gap: nothing of the deleted response or before it')
  t.same(ids(await store.chain(a, 'resp_1')), ['msg_in_resp_1', 'msg_out_resp_1'], 'the part before the gap still continues')
})

onEachDatabase(t, 'past RESPONSES_MAX_PER_ACCOUNT the account\'s oldest are evicted; other accounts keep theirs', async (t, db) => {
  const a = await account(db, 'a@x')
  const b = await account(db, 'b@x')
  const store = new StoredResponses(db, { limits: limits({ maxPerAccount: 3 }) })
  await store.save(turn(b, 'resp_b1', null))
  await store.save(turn(b, 'resp_b2', null))
  for (let i = 1; i <= 5; i++) await store.save(turn(a, `resp_a${i}`, i === 1 ? null : `resp_a${i - 1}`))
  t.equal(await store.count(a), 3)
  t.equal(await store.get(a, 'resp_a1'), undefined, 'oldest evicted')
  t.equal(await store.get(a, 'resp_a2'), undefined)
  t.ok(await store.get(a, 'resp_a3'))
  t.ok(await store.get(a, 'resp_a5'), 'the newest is kept')
  t.equal(await store.count(b), 2, 'another account is untouched')
  t.equal(await store.chain(a, 'resp_a5'), undefined, 'a conversation whose start was evicted cannot be continued')

  const none = new StoredResponses(db, { limits: limits({ maxPerAccount: 0 }) })
  await none.save(turn(b, 'resp_b3', null))
  t.equal(await none.get(b, 'resp_b3'), undefined, 'RESPONSES_MAX_PER_ACCOUNT=0 stores nothing')
})

onEachDatabase(t, 'a response over RESPONSES_MAX_BYTES is not stored, and the drop is logged', async (t, db) => {
  const a = await account(db, 'a@x')
  const warnings: Array<Record<string, unknown>> = []
  const store = new StoredResponses(db, { limits: limits({ maxBytes: 4096 }), log: { warn: obj => { warnings.push(obj) } } })
  const small = turn(a, 'resp_small', null, { text: 'x'.repeat(1000) })
  const big = turn(a, 'resp_big', null, { text: 'é'.repeat(2000) }) // 2000 characters, 4000 bytes of UTF-8
  await store.save(small)
  await store.save(big)
  t.ok(await store.get(a, 'resp_small'))
  t.equal(await store.get(a, 'resp_big'), undefined, 'counted in bytes, not characters')
  t.equal(warnings.length, 1)
  t.match(warnings[0], { responseId: 'resp_big', accountId: a, maxBytes: 4096 })
  t.ok((warnings[0].bytes as number) > 4096)
})

onEachDatabase(t, 'a conversation reaches back through at most MAX_EARLIER_RESPONSES; a longer one or a cycle is refused quickly', async (t, db) => {
  const a = await account(db, 'a@x')
  const store = new StoredResponses(db)
  // Rows written directly: as save() would write them, without 1,000 round trips.
  const row = (i: number, previous: string | null) => ({
    ...bareRow(a, `resp_${i}`, previous),
    response: JSON.stringify({ id: `resp_${i}`, output: [{ id: `out_${i}` }] }),
    input: JSON.stringify([{ id: `in_${i}` }]),
  })
  const rows = Array.from({ length: MAX_EARLIER_RESPONSES + 2 }, (_, i) => row(i, i === 0 ? null : `resp_${i - 1}`))
  for (let i = 0; i < rows.length; i += 200) await db.insertInto('stored_responses').values(rows.slice(i, i + 200)).execute()

  const longest = `resp_${MAX_EARLIER_RESPONSES}` // exactly MAX_EARLIER_RESPONSES earlier responses
  const items = await store.chain(a, longest)
  t.equal(items?.length, 2 * (MAX_EARLIER_RESPONSES + 1), 'the longest allowed conversation is read whole')
  t.same(items?.slice(0, 3).map(i => i.id), ['in_0', 'out_0', 'in_1'])

  const tooLong = `resp_${MAX_EARLIER_RESPONSES + 1}`
  const err = await store.chain(a, tooLong).then(() => undefined, (e: unknown) => e)
  t.ok(err instanceof ApiError, 'refused')
  t.match(err, { status: 400, code: 'invalid_parameter', param: 'previous_response_id' })
  t.equal((await store.inputItems(a, tooLong))?.length, 2 * MAX_EARLIER_RESPONSES + 1, 'its input items: the newest responses that are followed, no more')

  // Links the server never writes (each response is older than the one continuing it), as a hostile or damaged table could hold.
  await db.insertInto('stored_responses').values([
    { ...row(-1, 'resp_cycle_b'), id: 'resp_cycle_a' },
    { ...row(-2, 'resp_cycle_a'), id: 'resp_cycle_b' },
  ]).execute()
  const started = Date.now()
  await t.rejects(store.chain(a, 'resp_cycle_a'), { param: 'previous_response_id', message: /more than 1000 responses/ }, 'a cycle ends at the bound')
  t.ok((await store.inputItems(a, 'resp_cycle_a'))!.length > 0)
  t.ok(Date.now() - started < 10_000, `bounded (${Date.now() - started} ms)`)
})

onEachDatabase(t, 'a conversation over RESPONSES_MAX_CONVERSATION_BYTES is refused; its input items are the newest that fit', async (t, db) => {
  const a = await account(db, 'a@x')
  const store = new StoredResponses(db, { limits: limits({ maxConversationBytes: 3000 }) })
  for (let i = 1; i <= 3; i++) await store.save(turn(a, `resp_${i}`, i === 1 ? null : `resp_${i - 1}`, { text: 'y'.repeat(900) }))
  t.same(ids(await store.chain(a, 'resp_2')), ['msg_in_resp_1', 'msg_out_resp_1', 'msg_in_resp_2', 'msg_out_resp_2'], 'two fit')
  await t.rejects(store.chain(a, 'resp_3'), { status: 400, code: 'invalid_parameter', param: 'previous_response_id', message: /RESPONSES_MAX_CONVERSATION_BYTES/ })
  t.same(ids(await store.inputItems(a, 'resp_3')), ['msg_in_resp_2', 'msg_out_resp_2', 'msg_in_resp_3'])
})

async function reopenedStoreReads (t: Test, kind: 'sqlite' | 'postgres'): Promise<void> {
  const where = await testDatabase(t, kind)
  if (where === undefined) return
  let db = await openMigratedDatabase(where)
  const a = await account(db, 'a@x')
  await new StoredResponses(db).save(turn(a, 'resp_1', null))
  await new StoredResponses(db).save(turn(a, 'resp_2', 'resp_1'))
  await db.destroy()
  db = await openMigratedDatabase(where)
  t.teardown(() => db.destroy())
  const store = new StoredResponses(db)
  t.same(JSON.parse((await store.get(a, 'resp_2'))!), turn(a, 'resp_2', 'resp_1').response)
  t.same(ids(await store.chain(a, 'resp_2')), ['msg_in_resp_1', 'msg_out_resp_1', 'msg_in_resp_2', 'msg_out_resp_2'])
}
t.test('nothing stored is lost when the database is closed and opened again [sqlite]', t => reopenedStoreReads(t, 'sqlite'))
t.test('nothing stored is lost when the database is closed and opened again [postgres]', t => reopenedStoreReads(t, 'postgres'))

onEachDatabase(t, 'retention removes responses stored before RESPONSES_RETENTION_DAYS, any account\'s, in batches', async (t, db) => {
  const a = await account(db, 'a@x')
  const b = await account(db, 'b@x')
  let now = new Date('2026-01-01T00:00:00Z')
  const store = new StoredResponses(db, { now: () => now })
  for (let i = 0; i < 7; i++) await store.save(turn(i % 2 === 0 ? a : b, `resp_old_${i}`, null))
  now = new Date(now.getTime() + 20 * DAY_MS)
  await store.save(turn(a, 'resp_new', null))

  now = new Date(now.getTime() + 15 * DAY_MS) // old ones are 35 days old, the new one 15
  const retention = new ResponseRetention(store, { retentionDays: 30, batch: 2, now: () => now })
  t.equal(await retention.runOnce(), 7, 'batch after batch until none is left')
  t.equal(await store.count(a) + await store.count(b), 1)
  t.ok(await store.get(a, 'resp_new'))
  t.equal(await retention.runOnce(), 0)

  const forever = new ResponseRetention(store, { retentionDays: 0, now: () => new Date(now.getTime() + 1000 * DAY_MS) })
  t.equal(await forever.runOnce(), 0, 'RESPONSES_RETENTION_DAYS=0 keeps everything')
  t.ok(await store.get(a, 'resp_new'))
})

onEachDatabase(t, 'two replicas running retention together delete every expired row once, without errors', async (t, db) => {
  const a = await account(db, 'a@x')
  const old = new Date('2025-01-01T00:00:00Z')
  const rows = Array.from({ length: 600 }, (_, i) => bareRow(a, `resp_${i}`, null, old))
  for (let i = 0; i < rows.length; i += 200) await db.insertInto('stored_responses').values(rows.slice(i, i + 200)).execute()
  const replica = (): ResponseRetention => new ResponseRetention(new StoredResponses(db), { retentionDays: 30, batch: 50 })
  const [one, two] = await Promise.all([replica().runOnce(), replica().runOnce()])
  const left = await new StoredResponses(db).count(a)
  // A replica stops early when the other holds the rows it would take; what is left goes at the next run.
  t.equal(one + two + left, 600, `deleted ${one} + ${two}, ${left} left for the next run`)
  t.equal(await replica().runOnce(), left)
  t.equal(await new StoredResponses(db).count(a), 0)
})

t.test('the retention job runs on its timer, goes on after a failed run, and stop() waits for a run in progress', async t => {
  // The job's timers are unref'd: without something else holding the event loop, this test's process would end first.
  const holdOpen = setInterval(() => {}, 1000)
  t.teardown(() => clearInterval(holdOpen))
  let calls = 0
  let release: (() => void) | undefined
  let started!: () => void
  const running = new Promise<void>(resolve => { started = resolve })
  const store = {
    deleteStoredBefore: async (): Promise<number> => {
      calls++
      started()
      await new Promise<void>(resolve => { release = resolve })
      return 0
    },
  }
  const retention = new ResponseRetention(store, { retentionDays: 1, firstRunMs: 5, intervalMs: 5 })
  retention.start()
  await running
  let stopped = false
  const stopping = retention.stop().then(() => { stopped = true })
  await new Promise(resolve => setTimeout(resolve, 30))
  t.equal(stopped, false, 'stop waits for the run in progress')
  release!()
  await stopping
  t.equal(stopped, true)
  await new Promise(resolve => setTimeout(resolve, 30))
  t.equal(calls, 1, 'no run after stop')

  const warned: string[] = []
  const failing = new ResponseRetention({ deleteStoredBefore: async () => { throw new Error('database went away') } },
    { retentionDays: 1, firstRunMs: 1, intervalMs: 1, log: { warn: (obj, msg) => { warned.push(msg) } } })
  failing.start()
  while (warned.length < 2) await new Promise(resolve => setTimeout(resolve, 5))
  await failing.stop()
  t.match(warned[0], /next run tries again/, 'a failed run is logged and the job goes on')
})
