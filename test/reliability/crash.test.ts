// kill -9 in the middle of load. A real `chatd serve` process answers steady
// traffic (the fast loopback model) while `chatd keys create` adds keys beside
// it; then it is SIGKILLed, with requests in flight, and started again on the
// same database. On SQLite the restart runs WAL recovery; after it:
// integrity_check is ok, every key created before the kill authenticates,
// every complete 200 has its usage row (matched by completion id), no row is
// half-written, and the server serves again. The same on PostgreSQL.

import { spawn } from 'node:child_process'
import { statSync } from 'node:fs'
import t, { type Test } from 'tap'
import { Accounts } from '../../src/accounts/accounts.ts'
import { sql } from 'kysely'
import { openMigratedDatabase } from '../../src/store/database.ts'
import { NodeSqliteDatabase } from '../../src/store/node-sqlite.ts'
import { startChatd } from '../helpers/chatd-process.ts'
import { testDatabase, type DatabaseKind } from '../helpers/databases.ts'
import { fakeModelsFile, fakeUpstream } from '../helpers/fake-upstream.ts'
import { driveLoad, tally } from '../helpers/fault-load.ts'
import { REPO_ROOT } from '../helpers/models.ts'

const ADMIN_KEY = `sk-chatd-${'Crash9ok'.repeat(4)}`
const sleep = (ms: number): Promise<void> => new Promise(resolve => setTimeout(resolve, ms))

/** `chatd keys create`: resolves with the printed key, or undefined when the command failed. */
function cliKey (env: Record<string, string>, email: string, name: string): Promise<string | undefined> {
  const child = spawn(process.execPath, ['src/cli.ts', 'keys', 'create', '--email', email, '--name', name], {
    cwd: REPO_ROOT,
    env: { ...process.env, LOG_LEVEL: 'silent', ...env },
    stdio: ['ignore', 'pipe', 'ignore'],
  })
  let out = ''
  child.stdout.on('data', chunk => { out += chunk })
  return new Promise(resolve => child.once('exit', code => resolve(code === 0 ? out.trim() : undefined)))
}

async function crashAndRecover (t: Test, kind: DatabaseKind): Promise<void> {
  const where = await testDatabase(t, kind)
  if (where === undefined) return
  const databaseUrl = where.kind === 'sqlite' ? `sqlite://${where.path}` : where.url
  const dir = t.testdir()
  const upstream = await fakeUpstream(t, { delayMs: 15 })
  const env = { DATABASE_URL: databaseUrl, MODELS_FILE: fakeModelsFile(dir, upstream), CHATD_ADMIN_KEY: ADMIN_KEY }

  // The first start creates the schema and the admin account (CHATD_ADMIN_KEY).
  const first = await startChatd(t, env)
  const setup = await openMigratedDatabase(where)
  const accounts = new Accounts(setup)
  await accounts.create({ email: 'cli@example.com', tier: 'unlimited' })
  await setup.destroy()

  const load = driveLoad({ url: first.url, key: ADMIN_KEY, workers: 4 })
  // Keys made by the CLI, a separate process writing the same database while the server is busy.
  const keys: string[] = [ADMIN_KEY]
  let making = true
  const maker = (async () => {
    // eslint-disable-next-line no-unmodified-loop-condition -- cleared from outside when the crash comes
    for (let i = 0; making; i++) {
      const key = await cliKey(env, 'cli@example.com', `cli-${i}`)
      if (making && key) keys.push(key)
    }
  })()
  // Busy for at least 2.5 s, and until the CLI (a Node start each time: seconds on a loaded machine) has made a key.
  const started = Date.now()
  while (Date.now() - started < 2500 || (keys.length < 2 && Date.now() - started < 20_000)) await sleep(100)
  making = false
  // The CLI's last run ends first: a clean close of the last other connection would
  // checkpoint the WAL and delete it, and leave SQLite nothing to recover.
  await maker
  const keysBeforeKill = [...keys]
  await first.kill9()
  const outcomes = await load.stop()

  const complete = outcomes.filter(o => o.complete)
  t.comment(`before the kill: ${JSON.stringify(tally(outcomes))}; ${complete.length} complete replies; ${keysBeforeKill.length - 1} keys made by the CLI`)
  t.ok(complete.length > 20, 'the server was busy when it was killed')
  t.ok(outcomes.some(o => !o.complete), 'and requests were in flight')
  t.ok(keysBeforeKill.length > 1, 'the CLI made keys while it ran')

  if (where.kind === 'sqlite') {
    // The kill left committed transactions in the write-ahead log, not yet in the database file.
    t.ok(statSync(`${where.path}-wal`).size > 0, `the kill left a WAL of ${statSync(`${where.path}-wal`).size} bytes to recover`)
  }
  // Restart on the same database: SQLite replays its WAL here.
  const second = await startChatd(t, env)
  const db = await openMigratedDatabase(where)
  t.teardown(() => db.destroy())
  if (kind === 'sqlite') {
    const { rows } = await sql<{ integrity_check: string }>`PRAGMA integrity_check`.execute(db)
    t.same(rows.map(r => r.integrity_check), ['ok'], 'PRAGMA integrity_check: ok')
  }

  for (const key of keysBeforeKill) {
    const res = await fetch(`${second.url}/api/v1/models`, { headers: { authorization: `Bearer ${key}` } })
    t.equal(res.status, 200, `key ${key.slice(0, 15)}… made before the kill authenticates`)
  }

  const rows = await db.selectFrom('usage_records').selectAll().execute()
  const byId = new Map(rows.map(r => [r.request_id, r]))
  const missing = complete.filter(o => !byId.has(o.id!))
  t.same(missing, [], `every one of the ${complete.length} complete replies has its usage row`)
  t.same(complete.map(o => byId.get(o.id!)).filter(r => r && (r.status !== 'completed' || r.prompt_tokens !== 5 || r.completion_tokens !== 4)), [], 'with the status and tokens of its reply')
  const prefixes = new Set(keysBeforeKill.map(k => k.slice(0, 15)))
  const malformed = rows.filter(r =>
    !['completed', 'cancelled', 'failed'].includes(r.status) ||
    !prefixes.has(r.key_prefix) || r.model !== 'fake' ||
    !Number.isInteger(r.prompt_tokens) || !Number.isInteger(r.completion_tokens) || r.prompt_tokens < 0 || r.completion_tokens < 0 ||
    !Number.isInteger(r.latency_ms) || Number.isNaN(Date.parse(r.created_at)) ||
    typeof r.request_id !== 'string' || !r.request_id.startsWith('chatcmpl-'))
  t.same(malformed, [], `no half-written row among all ${rows.length}`)
  t.equal(new Set(rows.map(r => r.request_id)).size, rows.length, 'no request has two rows')
  // A reply cut by the kill may still have its row: it was committed before the last byte, which never left.
  t.comment(`rows of replies cut off by the kill: ${rows.length - complete.length}`)

  const again = driveLoad({ url: second.url, key: keysBeforeKill.at(-1)!, workers: 2 })
  await sleep(1000)
  const after = await again.stop()
  t.ok(after.length > 0 && after.every(o => o.complete), `the restarted server serves again (${JSON.stringify(tally(after))})`)
  // The rows of the second run are there too: it kept writing where the first stopped.
  const more = await db.selectFrom('usage_records').select('request_id').where('request_id', 'in', after.map(o => o.id!)).execute()
  t.equal(more.length, after.length, 'and records its usage')
}

t.test('kill -9 during load [sqlite]', t => crashAndRecover(t, 'sqlite'))
t.test('kill -9 during load [postgres]', t => crashAndRecover(t, 'postgres'))

t.test('SQLite commits are synced to disk (synchronous = FULL in WAL mode)', async t => {
  const db = new NodeSqliteDatabase(`${t.testdir()}/sync.db`)
  t.teardown(() => db.close())
  t.same(db.prepare('PRAGMA journal_mode').all([]), [{ journal_mode: 'wal' }])
  // 2 = FULL: each commit fsyncs the WAL, so it survives power loss too, not only a kill of the process.
  t.same(db.prepare('PRAGMA synchronous').all([]), [{ synchronous: 2 }])
})
