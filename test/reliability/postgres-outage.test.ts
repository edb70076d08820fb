// PostgreSQL going away under load, without touching the shared server: chatd
// reaches it through a fault proxy (test/helpers/fault-proxy.ts) that the test
// turns off (a restart: connections cut, new ones refused), blackholes (a
// partition: nothing answers), and whose backends it ends with
// pg_terminate_backend (an administrator, or a failover). Through all of it:
// requests fail fast and cleanly with 503 database_unavailable and
// Retry-After, never 500 and never past the configured timeout; the dashboard
// answers 503 too; the process survives; once the database is back requests
// succeed again on the same process; and every complete 200 has its usage row.

import t from 'tap'
import pg from 'pg'
import { Accounts } from '../../src/accounts/accounts.ts'
import { Sessions } from '../../src/accounts/sessions.ts'
import { openMigratedDatabase } from '../../src/store/database.ts'
import { startChatd } from '../helpers/chatd-process.ts'
import { fakeModelsFile, fakeUpstream } from '../helpers/fake-upstream.ts'
import { driveLoad, phaseClock, tally, type Outcome } from '../helpers/fault-load.ts'
import { faultProxy } from '../helpers/fault-proxy.ts'
import { exitIfLingering } from '../helpers/linger.ts'
import { POSTGRES_URL, throwawayPostgres } from '../helpers/services.ts'

const TIMEOUT_MS = 1500
const sleep = (ms: number): Promise<void> => new Promise(resolve => setTimeout(resolve, ms))

const done = t.test('PostgreSQL restarted, partitioned and its connections ended during load', async t => {
  const databaseUrl = await throwawayPostgres(t)
  if (databaseUrl === undefined) return
  const direct = await openMigratedDatabase({ kind: 'postgres', url: databaseUrl })
  t.teardown(() => direct.destroy())
  const accounts = new Accounts(direct)
  const account = await accounts.create({ email: 'load@example.com', tier: 'unlimited' })
  const { key } = await accounts.createKey(account.id, { name: 'load' })
  const session = await new Sessions(direct).create(account.id)

  const target = new URL(POSTGRES_URL)
  const proxy = await faultProxy(t, { host: target.hostname, port: Number(target.port || 5432) })
  const proxied = new URL(databaseUrl)
  proxied.port = String(proxy.port)
  const dir = t.testdir()
  const upstream = await fakeUpstream(t, { delayMs: 15 })
  const chatd = await startChatd(t, {
    DATABASE_URL: proxied.toString(),
    DATABASE_TIMEOUT_MS: String(TIMEOUT_MS),
    MODELS_FILE: fakeModelsFile(dir, upstream),
    LOG_LEVEL: 'warn',
  })

  const dashboard = () => fetch(`${chatd.url}/api`, { headers: { cookie: `chatd_session=${session}` }, redirect: 'manual' })
  const usage = () => fetch(`${chatd.url}/api/v1/usage`, { headers: { authorization: `Bearer ${key}` } })
  const load = driveLoad({ url: chatd.url, key, workers: 4 })
  const { began, phase } = phaseClock(load)

  const side: Record<string, Response> = {}
  await phase('before', 1500)
  await proxy.down()
  await phase('restart', 3000, async () => {
    await sleep(300)
    side.dashboardDown = await dashboard()
    side.usageDown = await usage()
  })
  await proxy.up()
  await phase('after-restart', 2500)
  await proxy.blackhole()
  await phase('partition', 4000, async () => {
    await sleep(300)
    const started = Date.now()
    side.dashboardPartition = await dashboard()
    side.dashboardPartitionMs = new Response(String(Date.now() - started))
  })
  await proxy.up()
  await phase('after-partition', 2500)
  // An administrator (or a failover) ends every connection chatd holds; the pool must shrug it off.
  let ended = 0
  await phase('terminated', 2500, async () => {
    const admin = new pg.Client({ connectionString: POSTGRES_URL })
    await admin.connect()
    const { rows } = await admin.query('SELECT count(*) AS n FROM (SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1 AND pid <> pg_backend_pid()) AS x', [proxied.pathname.slice(1)])
    ended = Number(rows[0].n)
    await admin.end()
  })
  const outcomes = await load.stop()

  const byPhase = (name: string): Outcome[] => outcomes.filter(o => o.phase === name)
  const report = Object.fromEntries(['before', 'restart', 'after-restart', 'partition', 'after-partition', 'terminated'].map(p => [p, tally(byPhase(p))]))
  t.comment(`outcomes per phase: ${JSON.stringify(report)}; backends ended: ${ended}`)

  t.equal(chatd.child.exitCode, null, 'the process survived every fault')
  if (chatd.child.exitCode !== null) t.comment(chatd.output().slice(-4000))
  t.same(outcomes.filter(o => o.status === 0 || o.status === 500 || (o.status !== 200 && o.status !== 503)), [], 'every answer was 200 or 503: no 500, no dropped connection')
  const refusals = outcomes.filter(o => o.status === 503)
  t.ok(refusals.length > 0, `requests were refused while the database was gone (${refusals.length})`)
  t.same(refusals.filter(o => o.code !== 'database_unavailable' || o.retryAfter !== '1'), [], 'each refusal is database_unavailable with Retry-After: 1')
  const slowest = Math.max(...outcomes.map(o => o.ms))
  t.ok(slowest < 2 * TIMEOUT_MS + 1500, `no request waited past the bound (slowest ${slowest} ms, DATABASE_TIMEOUT_MS ${TIMEOUT_MS})`)
  t.same(outcomes.filter(o => o.status === 200 && !o.complete), [], 'every 200 was a complete reply')

  for (const name of ['before', 'after-restart', 'after-partition', 'terminated']) {
    const ok = byPhase(name).filter(o => o.status === 200 && o.endPhase === name).length
    t.ok(ok > 0, `${name}: requests succeed (${ok}) on the same process`)
  }
  // After each recovery, a request that starts once the database is back and the
  // pool has had a moment, and ends before the next fault, gets through: nothing stays broken.
  for (const name of ['after-restart', 'after-partition', 'terminated']) {
    const late = byPhase(name).filter(o => o.startedAt > began[name] + 1000 && o.endPhase === name)
    t.same(late.filter(o => o.status !== 200).map(o => ({ ...o, afterRecoveryMs: o.startedAt - began[name] })), [], `${name}: every request a second after recovery succeeded (${late.length})`)
  }
  t.ok(byPhase('restart').filter(o => o.status === 503).length > 0, 'restart: new requests refused')
  // (One sent in the last instant may be served: it reaches chatd once the database is back.)
  t.same(byPhase('restart').filter(o => o.status === 200 && o.endPhase === 'restart'), [], 'restart: no request got through while the database was gone (it cannot be authenticated)')
  t.ok(byPhase('partition').filter(o => o.status === 503).length > 0, 'partition: new requests refused once the timeout ran out')

  t.equal(side.usageDown.status, 503, 'GET /api/v1/usage: 503 while the database is gone')
  t.match(await side.usageDown.json(), { error: { code: 'database_unavailable', type: 'server_error' } })
  for (const name of ['dashboardDown', 'dashboardPartition']) {
    t.equal(side[name].status, 503, `dashboard (${name}): 503, not 500`)
    t.equal(side[name].headers.get('retry-after'), '1')
    t.match(await side[name].text(), /Temporarily unavailable/)
  }
  const partitionMs = Number(await side.dashboardPartitionMs.text())
  t.ok(partitionMs < 2 * TIMEOUT_MS + 1000, `the dashboard gave up on the partitioned database in ${partitionMs} ms`)
  t.equal((await dashboard()).status, 200, 'the dashboard works again')

  // Every complete 200 has its row, by completion id: rows of replies that ended while the
  // database was away were kept and written once it was back.
  const ids = outcomes.filter(o => o.complete).map(o => o.id!)
  const deadline = Date.now() + 15_000
  let rows: Array<{ request_id: string | null; status: string; prompt_tokens: number; completion_tokens: number }> = []
  while (Date.now() < deadline) {
    rows = await direct.selectFrom('usage_records').select(['request_id', 'status', 'prompt_tokens', 'completion_tokens']).execute()
    const have = new Set(rows.map(r => r.request_id))
    if (ids.every(id => have.has(id))) break
    await sleep(250)
  }
  const have = new Map(rows.map(r => [r.request_id, r]))
  const missing = ids.filter(id => !have.has(id))
  t.same(missing, [], `each of the ${ids.length} complete replies has its usage row (${rows.length} rows in all)`)
  t.same(ids.map(id => have.get(id)).filter(r => r && (r.status !== 'completed' || r.prompt_tokens !== 5 || r.completion_tokens !== 4)), [], 'with the reply\'s status and tokens')
  t.equal(new Set(rows.map(r => r.request_id)).size, rows.length, 'no row was written twice')
  const endedInOutage = outcomes.filter(o => o.complete && o.phase !== o.endPhase).length
  t.comment(`replies that ended after a fault began or ended: ${endedInOutage}`)
})
// A socket the fault proxy could not close once kept this process spinning after it passed (fixed:
// reset() in fault-proxy.ts); see test/helpers/linger.ts. Nothing is known to be left open: a leak fails.
exitIfLingering(t, done)
