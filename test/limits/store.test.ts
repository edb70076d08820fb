// The limit stores, one suite for both: in-process, and Redis (two
// connections standing in for two replicas). A test that watches entries leave
// a shortened window waits through the store's clock: the in-process store's
// is moved on by the test, Redis keeps its own (TIME), so there the wait is
// real. Bounds on the times a store reports come from what it reports (peeks
// just before and after) and from how long the test waited at least, never
// from how soon a timer fired.

import { setTimeout as sleep } from 'node:timers/promises'
import t, { type Test } from 'tap'
import { Redis } from 'ioredis'
import { MemoryLimitStore } from '../../src/limits/memory-store.ts'
import { RedisLimitStore } from '../../src/limits/redis-store.ts'
import type { AdmitRequest, LimitStore, MonthRef, Rules } from '../../src/limits/store.ts'
import { throwawayRedis } from '../helpers/services.ts'

/** Two handles on one store: for Redis, two connections (two replicas); in-process there is only one. */
type Pair = [LimitStore, LimitStore]

/** The store's clock: `now()` reads it, `wait(ms)` lets at least `ms` pass on it. */
interface Clock { now: () => number; wait: (ms: number) => Promise<void> }

async function stores (t: Test, kind: 'memory' | 'redis', windowMs?: number): Promise<{ pair: Pair; clock: Clock } | undefined> {
  if (kind === 'memory') {
    // Real time moved on by the test's waits: nothing depends on when a timer fires.
    let offset = 0
    const clock = { now: () => Date.now() + offset, wait: async (ms: number) => { offset += ms } }
    const store = new MemoryLimitStore({ windowMs, now: clock.now })
    return { pair: [store, store], clock }
  }
  const redis = await throwawayRedis(t)
  if (!redis) return undefined
  const second = new Redis(redis.url)
  t.teardown(() => second.quit())
  return {
    pair: [
      new RedisLimitStore(redis.redis, { prefix: redis.prefix, windowMs }),
      new RedisLimitStore(second, { prefix: redis.prefix, windowMs }),
    ],
    // Redis's TIME, on this machine's clock; a timer never fires before its time.
    clock: { now: Date.now, wait: async (ms: number) => { await sleep(ms) } },
  }
}

function onEachStore (title: string, body: (t: Test, pair: Pair, clock: Clock) => Promise<void>, windowMs?: number): void {
  for (const kind of ['memory', 'redis'] as const) {
    t.test(`${title} [${kind}]`, async t => {
      const store = await stores(t, kind, windowMs)
      if (store) await body(t, store.pair, store.clock)
    })
  }
}

/** A short window, long enough that the Redis tests' entries outlast a stalled machine by a second. */
const WINDOW = 2000

const NONE: Rules = { requestsPerMinute: null, tokensPerMinute: null, callsPerMonth: null }
const farMonth = (): MonthRef => ({ id: '2099-01', endMs: Date.now() + 3_600_000 })
let seq = 0
const ask = (rules: Partial<Rules>, extra: Partial<AdmitRequest> = {}): AdmitRequest =>
  ({ accountId: 1, requestId: `r${++seq}`, tokens: 0, rules: { ...NONE, ...rules }, month: farMonth(), monthSeed: 0, ...extra })

onEachStore('requests per minute: exactly N of 3N concurrent requests, over two replicas', async (t, [a, b]) => {
  const N = 7
  const results = await Promise.all(Array.from({ length: 3 * N }, (_, i) => (i % 2 ? a : b).admit(ask({ requestsPerMinute: N }))))
  const admitted = results.filter(r => r.outcome === 'admitted')
  t.equal(admitted.length, N, `${N} admitted`)
  for (const r of results) {
    if (r.outcome !== 'refused') continue
    t.equal(r.limit, 'requests')
    t.ok(r.retryAfterMs > 55_000 && r.retryAfterMs <= 60_000, `retry after the oldest leaves (${r.retryAfterMs} ms)`)
  }
  const usage = await a.peek(1, farMonth())
  t.equal(usage.requests, N, 'refused requests counted nothing')
  t.ok(usage.requestsResetMs > 55_000 && usage.requestsResetMs <= 60_000)
})

onEachStore('a refusal says when the next slot frees; it frees then', async (t, [a, b], clock) => {
  t.equal((await a.admit(ask({ requestsPerMinute: 2 }))).outcome, 'admitted')
  await clock.wait(WINDOW / 2)
  t.equal((await b.admit(ask({ requestsPerMinute: 2 }))).outcome, 'admitted')
  // The first request's time left in the window, read just before and just after the refusal.
  const before = await a.peek(1, farMonth())
  const refused = await a.admit(ask({ requestsPerMinute: 2 }))
  const after = await a.peek(1, farMonth())
  if (refused.outcome !== 'refused') throw new Error('expected a refusal')
  t.equal(before.requests, 2, 'both requests are in the window')
  t.ok(before.requestsResetMs <= WINDOW * 3 / 4, `the first is the older, by the ${WINDOW / 2} ms waited (it leaves in ${before.requestsResetMs} ms)`)
  t.ok(after.requestsResetMs <= refused.retryAfterMs && refused.retryAfterMs <= before.requestsResetMs,
    `retry when the first leaves: ${after.requestsResetMs} <= ${refused.retryAfterMs} <= ${before.requestsResetMs} ms`)
  t.equal(refused.usage.requests, 2)
  await clock.wait(refused.retryAfterMs + 20)
  t.equal((await b.admit(ask({ requestsPerMinute: 2 }))).outcome, 'admitted', 'admitted once it left')
  await clock.wait(WINDOW + 20)
  const idle = await a.peek(1, farMonth())
  t.same([idle.requests, idle.tokens, idle.requestsResetMs], [0, 0, 0], 'an idle window is empty')
}, WINDOW)

onEachStore('tokens per minute: reservations, settlement with the real count, retry time', async (t, [a, b], clock) => {
  const rules = { tokensPerMinute: 100 }
  t.equal((await a.admit(ask(rules, { requestId: 'A', tokens: 60 }))).outcome, 'admitted')
  const early = await b.admit(ask(rules, { requestId: 'B', tokens: 50 }))
  t.match(early, { outcome: 'refused', limit: 'tokens', usage: { tokens: 60 } }, '60 reserved + 50 > 100')

  await a.settle({ accountId: 1, requestId: 'A', tokens: 20, refundCall: false, month: farMonth() })
  t.equal((await a.peek(1, farMonth())).tokens, 20, 'the real count replaced the reservation')
  await clock.wait(WINDOW / 2)
  const admitted = await b.admit(ask(rules, { requestId: 'B', tokens: 50 }))
  t.match(admitted, { outcome: 'admitted', usage: { tokens: 70, requests: 2 } })

  const before = await a.peek(1, farMonth())
  const refused = await a.admit(ask(rules, { requestId: 'C', tokens: 40 }))
  const after = await a.peek(1, farMonth())
  if (refused.outcome !== 'refused') throw new Error('expected a refusal')
  t.equal(refused.limit, 'tokens')
  t.equal(before.tokens, 70, 'A and B are in the window')
  // Only A has to leave (70 - 20 + 40 <= 100), and A is the oldest: the window's reset is A's.
  t.ok(after.tokensResetMs <= refused.retryAfterMs && refused.retryAfterMs <= before.tokensResetMs,
    `retry when A leaves: ${after.tokensResetMs} <= ${refused.retryAfterMs} <= ${before.tokensResetMs} ms`)
  t.ok(before.tokensResetMs <= WINDOW * 3 / 4, `A is older than B, by the ${WINDOW / 2} ms waited`)
  await clock.wait(refused.retryAfterMs + 20)
  t.match(await a.admit(ask(rules, { requestId: 'C', tokens: 40 })), { outcome: 'admitted', usage: { tokens: 90 } }, 'A left, B is still in')
}, WINDOW)

onEachStore('settling a request that has left the window changes nothing', async (t, [a], clock) => {
  await a.admit(ask({ tokensPerMinute: 100 }, { requestId: 'old', tokens: 30 }))
  await clock.wait(450)
  await a.settle({ accountId: 1, requestId: 'old', tokens: 99, refundCall: false, month: farMonth() })
  t.equal((await a.peek(1, farMonth())).tokens, 0)
}, 400)

onEachStore('monthly allowance: seeded from the records, counted, refused until the month ends, refunded', async (t, [a, b], clock) => {
  const month: MonthRef = { id: '2099-02', endMs: Date.now() + 90_000 }
  const rules = { callsPerMonth: 3 }
  t.same(await a.admit(ask(rules, { month, monthSeed: undefined })), { outcome: 'needs-seed' }, 'no counter yet: asks for the records\' count')
  t.match(await a.admit(ask(rules, { month, monthSeed: 1 })), { outcome: 'admitted', usage: { calls: 2 } })
  t.match(await b.admit(ask(rules, { month, monthSeed: 0 })), { outcome: 'admitted', usage: { calls: 3 } }, 'a later seed does not reset a live counter')
  const sent = clock.now()
  const refused = await a.admit(ask(rules, { month }))
  const answered = clock.now()
  if (refused.outcome !== 'refused') throw new Error('expected a refusal')
  t.equal(refused.limit, 'allowance')
  // The store's clock read between the two readings here (Redis's in whole milliseconds).
  t.ok(month.endMs - answered - 1 <= refused.retryAfterMs && refused.retryAfterMs <= month.endMs - sent + 1,
    `retry when the month ends (${refused.retryAfterMs} ms, sent ${month.endMs - sent} ms before it)`)
  t.equal((await a.peek(1, month)).calls, 3)

  await b.settle({ accountId: 1, requestId: 'x', tokens: 0, refundCall: true, month })
  t.equal((await a.peek(1, month)).calls, 2, 'a failed request gives its call back')
  t.match(await a.admit(ask(rules, { month })), { outcome: 'admitted', usage: { calls: 3 } })
  t.equal((await a.peek(1, { id: '2099-03', endMs: 0 })).calls, null, 'another month has its own counter')
})

onEachStore('the allowance is checked first, and a refusal by any limit counts nothing', async (t, [a]) => {
  const month: MonthRef = { id: '2099-04', endMs: Date.now() + 10_000 }
  const rules = { requestsPerMinute: 1, callsPerMonth: 5 }
  t.equal((await a.admit(ask(rules, { month, monthSeed: 0 }))).outcome, 'admitted')
  t.match(await a.admit(ask(rules, { month })), { outcome: 'refused', limit: 'requests' })
  t.equal((await a.peek(1, month)).calls, 1, 'the refused request did not use the allowance')
  const spent = await a.admit(ask({ callsPerMonth: 1 }, { month }))
  t.match(spent, { outcome: 'refused', limit: 'allowance' })
})

onEachStore('accounts have separate counts; no rules, no refusals', async (t, [a, b]) => {
  for (let i = 0; i < 5; i++) t.equal((await a.admit(ask({}, { accountId: 7 }))).outcome, 'admitted')
  t.equal((await b.admit(ask({ requestsPerMinute: 1 }, { accountId: 8 }))).outcome, 'admitted')
  t.equal((await a.peek(7, farMonth())).requests, 5)
  t.equal((await a.peek(8, farMonth())).requests, 1)
  t.equal((await a.peek(9, farMonth())).requests, 0)
})

onEachStore('a tier of 0 requests per minute refuses everything', async (t, [a]) => {
  t.match(await a.admit(ask({ requestsPerMinute: 0 })), { outcome: 'refused', limit: 'requests', retryAfterMs: 60_000 })
})

onEachStore('extending a reservation: all or nothing within the minute\'s tokens, over two replicas', async (t, [a, b], clock) => {
  t.equal((await a.admit(ask({ tokensPerMinute: 100 }, { requestId: 'X', tokens: 40 }))).outcome, 'admitted')
  t.equal(await b.extend({ accountId: 1, requestId: 'X', tokens: 50, tokensPerMinute: 100 }), true, '40 + 50 fits 100')
  t.match(await a.peek(1, farMonth()), { tokens: 90, requests: 1 }, 'added to the request\'s own entry: no request more')
  t.equal(await a.extend({ accountId: 1, requestId: 'X', tokens: 11, tokensPerMinute: 100 }), false, '90 + 11 does not')
  t.equal((await b.peek(1, farMonth())).tokens, 90, 'a refused extension adds nothing')
  t.equal(await a.extend({ accountId: 1, requestId: 'X', tokens: 1000, tokensPerMinute: null }), true, 'no token limit: added')
  t.equal((await a.peek(1, farMonth())).tokens, 1090)
  await a.settle({ accountId: 1, requestId: 'X', tokens: 70, refundCall: false, month: farMonth() })
  t.equal((await a.peek(1, farMonth())).tokens, 70, 'settling replaces the extended reservation with the real count')
  await clock.wait(WINDOW + 20)
  t.equal(await b.extend({ accountId: 1, requestId: 'X', tokens: 30, tokensPerMinute: 100 }), true, 'left the window: fits, adds nothing')
  t.equal((await a.peek(1, farMonth())).tokens, 0)
}, WINDOW)
