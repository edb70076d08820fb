// The limit stores, one suite for both: in-process, and Redis (two
// connections standing in for two replicas). Real time with a shortened
// window where a test watches entries leave it.

import { setTimeout as sleep } from 'node:timers/promises'
import t, { type Test } from 'tap'
import { Redis } from 'ioredis'
import { MemoryLimitStore } from '../../src/limits/memory-store.ts'
import { RedisLimitStore } from '../../src/limits/redis-store.ts'
import type { AdmitRequest, LimitStore, MonthRef, Rules } from '../../src/limits/store.ts'
import { throwawayRedis } from '../helpers/services.ts'

/** Two handles on one store: for Redis, two connections (two replicas); in-process there is only one. */
type Pair = [LimitStore, LimitStore]

async function stores (t: Test, kind: 'memory' | 'redis', windowMs?: number): Promise<Pair | undefined> {
  if (kind === 'memory') {
    const store = new MemoryLimitStore({ windowMs })
    return [store, store]
  }
  const redis = await throwawayRedis(t)
  if (!redis) return undefined
  const second = new Redis(redis.url)
  t.teardown(() => second.quit())
  return [
    new RedisLimitStore(redis.redis, { prefix: redis.prefix, windowMs }),
    new RedisLimitStore(second, { prefix: redis.prefix, windowMs }),
  ]
}

function onEachStore (title: string, body: (t: Test, pair: Pair) => Promise<void>, windowMs?: number): void {
  for (const kind of ['memory', 'redis'] as const) {
    t.test(`${title} [${kind}]`, async t => {
      const pair = await stores(t, kind, windowMs)
      if (pair) await body(t, pair)
    })
  }
}

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

onEachStore('a refusal says when the next slot frees; it frees then', async (t, [a, b]) => {
  t.equal((await a.admit(ask({ requestsPerMinute: 2 }))).outcome, 'admitted')
  await sleep(300)
  t.equal((await b.admit(ask({ requestsPerMinute: 2 }))).outcome, 'admitted')
  const refused = await a.admit(ask({ requestsPerMinute: 2 }))
  if (refused.outcome !== 'refused') throw new Error('expected a refusal')
  t.ok(refused.retryAfterMs > 500 && refused.retryAfterMs <= 700, `~700 ms until the first request leaves (${refused.retryAfterMs})`)
  t.equal(refused.usage.requests, 2)
  await sleep(refused.retryAfterMs + 20)
  t.equal((await b.admit(ask({ requestsPerMinute: 2 }))).outcome, 'admitted', 'admitted once it left')
  await sleep(1100)
  const idle = await a.peek(1, farMonth())
  t.same([idle.requests, idle.tokens, idle.requestsResetMs], [0, 0, 0], 'an idle window is empty')
}, 1000)

onEachStore('tokens per minute: reservations, settlement with the real count, retry time', async (t, [a, b]) => {
  const rules = { tokensPerMinute: 100 }
  t.equal((await a.admit(ask(rules, { requestId: 'A', tokens: 60 }))).outcome, 'admitted')
  const early = await b.admit(ask(rules, { requestId: 'B', tokens: 50 }))
  t.match(early, { outcome: 'refused', limit: 'tokens', usage: { tokens: 60 } }, '60 reserved + 50 > 100')

  await a.settle({ accountId: 1, requestId: 'A', tokens: 20, refundCall: false, month: farMonth() })
  t.equal((await a.peek(1, farMonth())).tokens, 20, 'the real count replaced the reservation')
  await sleep(200)
  const admitted = await b.admit(ask(rules, { requestId: 'B', tokens: 50 }))
  t.match(admitted, { outcome: 'admitted', usage: { tokens: 70, requests: 2 } })

  const refused = await a.admit(ask(rules, { requestId: 'C', tokens: 40 }))
  if (refused.outcome !== 'refused') throw new Error('expected a refusal')
  t.equal(refused.limit, 'tokens')
  // Only A has to leave (70 - 20 + 40 <= 100), and A is ~200 ms older than B.
  t.ok(refused.retryAfterMs > 600 && refused.retryAfterMs <= 800, `retry when A leaves (${refused.retryAfterMs} ms)`)
  await sleep(refused.retryAfterMs + 20)
  t.match(await a.admit(ask(rules, { requestId: 'C', tokens: 40 })), { outcome: 'admitted', usage: { tokens: 90 } })
}, 1000)

onEachStore('settling a request that has left the window changes nothing', async (t, [a]) => {
  await a.admit(ask({ tokensPerMinute: 100 }, { requestId: 'old', tokens: 30 }))
  await sleep(450)
  await a.settle({ accountId: 1, requestId: 'old', tokens: 99, refundCall: false, month: farMonth() })
  t.equal((await a.peek(1, farMonth())).tokens, 0)
}, 400)

onEachStore('monthly allowance: seeded from the records, counted, refused until the month ends, refunded', async (t, [a, b]) => {
  const month: MonthRef = { id: '2099-02', endMs: Date.now() + 90_000 }
  const rules = { callsPerMonth: 3 }
  t.same(await a.admit(ask(rules, { month, monthSeed: undefined })), { outcome: 'needs-seed' }, 'no counter yet: asks for the records\' count')
  t.match(await a.admit(ask(rules, { month, monthSeed: 1 })), { outcome: 'admitted', usage: { calls: 2 } })
  t.match(await b.admit(ask(rules, { month, monthSeed: 0 })), { outcome: 'admitted', usage: { calls: 3 } }, 'a later seed does not reset a live counter')
  const refused = await a.admit(ask(rules, { month }))
  if (refused.outcome !== 'refused') throw new Error('expected a refusal')
  t.equal(refused.limit, 'allowance')
  t.ok(refused.retryAfterMs > 85_000 && refused.retryAfterMs <= 90_000, `retry when the month ends (${refused.retryAfterMs} ms)`)
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
