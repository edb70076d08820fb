// Redis killed (SIGKILL) during load and started again, empty, on the same
// port: a redis-server of the test's own, never the shared one. While it is
// gone every chat completion is refused with 503 limits_unavailable and
// Retry-After (nothing runs uncounted), within the client's command timeout;
// the dashboard answers 503 (its page reads the limits, and the log-in
// throttle counts in the same Redis); afterwards the same chatd process
// serves again. What the restart costs is checked as documented: the rolling
// minute starts over (Redis held it alone), the monthly allowance does not
// (its counter is rebuilt from the usage rows in the database).

import { join } from 'node:path'
import t from 'tap'
import { Accounts } from '../../src/accounts/accounts.ts'
import { Sessions } from '../../src/accounts/sessions.ts'
import { RECONNECT_MAX_MS } from '../../src/limits/open-store.ts'
import { openMigratedDatabase } from '../../src/store/database.ts'
import { startChatd } from '../helpers/chatd-process.ts'
import { FAKE_MODEL, fakeModelsFile, fakeUpstream } from '../helpers/fake-upstream.ts'
import { driveLoad, phaseClock, tally, type Outcome } from '../helpers/fault-load.ts'
import { ownRedis } from '../helpers/redis-process.ts'

/** ioredis's commandTimeout in src/limits/open-store.ts: the longest a request waits on Redis. */
const COMMAND_TIMEOUT_MS = 2000
const sleep = (ms: number): Promise<void> => new Promise(resolve => setTimeout(resolve, ms))

t.test('Redis killed and restarted empty during load', async t => {
  const redis = await ownRedis(t)
  if (redis === undefined) return
  const dir = t.testdir({
    'tiers.json': JSON.stringify({
      tiers: {
        free: {},
        load: { requests_per_minute: 100000, calls_per_month: 100000 },
        perminute: { requests_per_minute: 2 },
        monthly: { calls_per_month: 3 },
      },
    }),
  })
  const databasePath = join(dir, 'chatd.db')
  const db = await openMigratedDatabase({ kind: 'sqlite', path: databasePath })
  t.teardown(() => db.destroy())
  const accounts = new Accounts(db)
  const keys: Record<string, string> = {}
  for (const tier of ['load', 'perminute', 'monthly']) {
    const account = await accounts.create({ email: `${tier}@example.com`, tier })
    keys[tier] = (await accounts.createKey(account.id, { name: tier })).key
  }
  const session = await new Sessions(db).create((await accounts.getByEmail('load@example.com')).id)

  const upstream = await fakeUpstream(t, { delayMs: 15 })
  const chatd = await startChatd(t, {
    DATABASE_URL: `sqlite://${databasePath}`,
    REDIS_URL: redis.url,
    MODELS_FILE: fakeModelsFile(dir, upstream),
    TIERS_FILE: join(dir, 'tiers.json'),
  })
  const chat = (key: string) => fetch(`${chatd.url}/api/v1/chat/completions`, {
    method: 'POST',
    headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
    body: JSON.stringify({ model: FAKE_MODEL, messages: [{ role: 'user', content: 'Hi' }], max_tokens: 8 }),
  })
  const dashboard = () => fetch(`${chatd.url}/api`, { headers: { cookie: `chatd_session=${session}` }, redirect: 'manual' })

  // Before: the small accounts use part of what they have.
  t.same([(await chat(keys.perminute)).status, (await chat(keys.perminute)).status, (await chat(keys.perminute)).status], [200, 200, 429], 'perminute: 2 a minute, the third refused')
  t.same([(await chat(keys.monthly)).status, (await chat(keys.monthly)).status], [200, 200], 'monthly: 2 of its 3 calls used')

  const load = driveLoad({ url: chatd.url, key: keys.load, workers: 4 })
  const { began, phase } = phaseClock(load)
  const side: Record<string, Response> = {}
  await phase('before', 1500)
  await redis.kill9()
  await phase('down', 4000, async () => {
    await sleep(500)
    side.dashboard = await dashboard()
    // A log-in attempt: its throttle cannot count, so it is refused rather than let through.
    const form = await fetch(`${chatd.url}/api/login`)
    const cookie = form.headers.getSetCookie().map(c => c.split(';')[0]).join('; ')
    const token = /name="_csrf" value="([^"]+)"/.exec(await form.text())![1]
    side.login = await fetch(`${chatd.url}/api/login`, {
      method: 'POST',
      redirect: 'manual',
      headers: { cookie, 'content-type': 'application/x-www-form-urlencoded' },
      body: new URLSearchParams({ _csrf: token, email: 'load@example.com', password: 'whatever password' }),
    })
    side.usage = await fetch(`${chatd.url}/api/v1/usage`, { headers: { authorization: `Bearer ${keys.load}` } })
  })
  await redis.restart()
  await phase('after', 3500)
  const outcomes = await load.stop()

  const byPhase = (name: string): Outcome[] => outcomes.filter(o => o.phase === name)
  t.comment(`outcomes per phase: ${JSON.stringify(Object.fromEntries(['before', 'down', 'after'].map(p => [p, tally(byPhase(p))])))}`)
  t.equal(chatd.child.exitCode, null, 'the process survived')
  t.same(outcomes.filter(o => o.status !== 200 && o.status !== 503), [], 'every answer was 200 or 503: no 500, nothing dropped')
  const refused = outcomes.filter(o => o.status === 503)
  t.ok(refused.length > 0, `refused while Redis was down: ${refused.length}`)
  t.same(refused.filter(o => o.code !== 'limits_unavailable' || o.retryAfter !== '1'), [], 'each refusal is limits_unavailable with Retry-After: 1')
  // Requests already admitted when Redis died finish (they were counted); none admitted after.
  // (One sent in the last instant of the outage may reach chatd once Redis is back.)
  const admittedWhileDown = byPhase('down').filter(o => o.status === 200 && o.endPhase === 'down')
  t.same(admittedWhileDown, [], 'no request sent while Redis was down got through uncounted')
  const slowest = Math.max(...outcomes.map(o => o.ms))
  t.ok(slowest < COMMAND_TIMEOUT_MS + 1500, `no request waited past the bound (slowest ${slowest} ms)`)
  t.ok(byPhase('before').filter(o => o.status === 200).length > 0, 'before: served')
  const firstBack = byPhase('after').find(o => o.status === 200)
  t.comment(`first success ${firstBack ? firstBack.startedAt + firstBack.ms - began.after : 'never'} ms after the restart`)
  // chatd reconnects with a growing pause of at most RECONNECT_MAX_MS (plus jitter); after that every request gets through.
  const late = byPhase('after').filter(o => o.startedAt > began.after + RECONNECT_MAX_MS + 500)
  t.ok(late.length > 0 && late.every(o => o.status === 200), `after the restart, the same process serves again (${late.length} late requests, ${JSON.stringify(tally(late))})`)

  t.equal(side.dashboard.status, 503, 'the dashboard: 503 while Redis is down, not 500')
  t.equal(side.dashboard.headers.get('retry-after'), '1')
  t.equal(side.login.status, 503, 'a log-in whose throttle cannot count is refused with 503')
  t.equal(side.usage.status, 503, 'GET /api/v1/usage: 503')
  t.match(await side.usage.json(), { error: { code: 'limits_unavailable' } })
  t.equal((await dashboard()).status, 200, 'the dashboard works again')

  // What the restart cost. The rolling minute lived only in Redis: it starts over, so the
  // perminute account gets its 2 again within the same minute (at most one extra minute's worth).
  t.same([(await chat(keys.perminute)).status, (await chat(keys.perminute)).status, (await chat(keys.perminute)).status], [200, 200, 429], 'perminute: the window started over with the empty Redis')
  // The allowance did not: its counter is rebuilt from the usage rows, so exactly one call is left.
  const monthly = [(await chat(keys.monthly)).status, (await chat(keys.monthly)).status]
  t.same(monthly, [200, 429], 'monthly: the allowance survived the restart (1 of 3 left, then refused)')

  // Every complete 200 of the load has its usage row.
  const ids = outcomes.filter(o => o.complete).map(o => o.id!)
  const rows = await db.selectFrom('usage_records').select('request_id').execute()
  const have = new Set(rows.map(r => r.request_id))
  t.same(ids.filter(id => !have.has(id)), [], `each of the ${ids.length} complete replies has its usage row`)
})
