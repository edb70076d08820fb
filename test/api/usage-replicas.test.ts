// Scale-out: two real `chatd serve` processes on one PostgreSQL database and
// one Redis, the real stories260k model behind both. An account limited to N
// requests a minute gets exactly N successes in total when 3N requests are
// spread over the two; an allowance of M calls a month gives exactly M; every
// success has its usage row in the shared database, and either replica's
// dashboard session and keys work on the other.

import { spawn, type ChildProcess } from 'node:child_process'
import { join } from 'node:path'
import t, { type Test } from 'tap'
import { Agent } from 'undici'
import { Accounts } from '../../src/accounts/accounts.ts'
import { openMigratedDatabase } from '../../src/store/database.ts'
import { REPO_ROOT, storiesModelEntry } from '../helpers/models.ts'
import { throwawayPostgres, throwawayRedis } from '../helpers/services.ts'

const MODEL = 'stories260k'
const N = 5
const M = 4

/** Starts `chatd serve` and resolves with its port once it listens and its model is ready. */
async function replica (t: Test, env: Record<string, string>): Promise<{ port: number; child: ChildProcess }> {
  const child = spawn(process.execPath, ['bin/chatd.js', 'serve'], {
    cwd: REPO_ROOT,
    env: { ...process.env, PORT: '0', HOST: '127.0.0.1', LOG_LEVEL: 'info', CHATD_AUTO_PULL: '0', ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  })
  t.teardown(async () => {
    if (child.exitCode !== null) return
    const exited = new Promise(resolve => child.once('exit', resolve))
    child.kill('SIGTERM')
    const timer = setTimeout(() => child.kill('SIGKILL'), 10_000)
    await exited
    clearTimeout(timer)
  })
  let output = ''
  child.stdout!.on('data', chunk => { output += chunk })
  child.stderr!.on('data', chunk => { output += chunk })
  const deadline = Date.now() + 60_000
  let port = 0
  while (Date.now() < deadline && child.exitCode === null) {
    port ||= Number(/listening at http:\/\/127\.0\.0\.1:(\d+)/.exec(output)?.[1] ?? 0)
    if (port && (await fetch(`http://127.0.0.1:${port}/readyz`).catch(() => undefined))?.status === 200) return { port, child }
    await new Promise(resolve => setTimeout(resolve, 100))
  }
  throw new Error(`a replica did not become ready:\n${output}`)
}

t.test('two replicas on PostgreSQL and Redis enforce one account\'s limits exactly once in total', async t => {
  const databaseUrl = await throwawayPostgres(t)
  const redis = await throwawayRedis(t)
  if (databaseUrl === undefined || redis === undefined) return

  const dir = t.testdir({
    'models.json': JSON.stringify({ models: [storiesModelEntry(MODEL)] }),
    'tiers.json': JSON.stringify({
      tiers: {
        free: {},
        perminute: { requests_per_minute: N, tokens_per_minute: 100000, max_tokens_per_request: 16 },
        monthly: { calls_per_month: M },
      },
    }),
  })
  // The schema and the accounts exist before the replicas start, as after any first deploy.
  const db = await openMigratedDatabase({ kind: 'postgres', url: databaseUrl })
  t.teardown(() => db.destroy())
  const accounts = new Accounts(db)
  const keys: Record<string, string> = {}
  for (const tier of ['perminute', 'monthly']) {
    const account = await accounts.create({ email: `${tier}@example.com`, tier })
    keys[tier] = (await accounts.createKey(account.id, { name: tier })).key
  }

  const env = {
    DATABASE_URL: databaseUrl,
    REDIS_URL: redis.url,
    REDIS_PREFIX: redis.prefix,
    MODELS_FILE: join(dir, 'models.json'),
    TIERS_FILE: join(dir, 'tiers.json'),
    ONNX_THREADS: '1',
  }
  const replicas = await Promise.all([replica(t, env), replica(t, env)])
  const agent = new Agent({ pipelining: 0 })
  t.teardown(() => agent.close())

  const chat = (i: number, key: string) => fetch(`http://127.0.0.1:${replicas[i % 2].port}/api/v1/chat/completions`, {
    method: 'POST',
    headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
    body: JSON.stringify({ model: MODEL, messages: [{ role: 'user', content: 'Once upon a time' }], max_tokens: 4, temperature: 0 }),
    dispatcher: agent,
  })

  const perMinute = await Promise.all(Array.from({ length: 3 * N }, (_, i) => chat(i, keys.perminute)))
  const statuses = perMinute.map(r => r.status)
  t.equal(statuses.filter(s => s === 200).length, N, `exactly ${N} of ${3 * N} succeeded across both replicas (${statuses.join(' ')})`)
  t.equal(statuses.filter(s => s === 429).length, 2 * N, 'the rest were refused')
  const byReplica = [0, 1].map(r => perMinute.filter((res, i) => i % 2 === r && res.status === 200).length)
  t.ok(byReplica[0] + byReplica[1] === N, `successes per replica: ${byReplica.join(' + ')}`)
  for (const res of perMinute.filter(r => r.status === 429)) {
    const body = await res.json() as { error: { code: string } }
    t.equal(body.error.code, 'rate_limit_exceeded')
    const retryAfter = Number(res.headers.get('retry-after'))
    t.ok(retryAfter >= 55 && retryAfter <= 60, `Retry-After ${retryAfter}`)
    t.equal(res.headers.get('x-ratelimit-remaining-requests'), '0')
  }
  const usages = await Promise.all(perMinute.filter(r => r.status === 200).map(r => r.json() as Promise<{ usage: { prompt_tokens: number; completion_tokens: number } }>))

  const monthly = await Promise.all(Array.from({ length: 3 * M }, (_, i) => chat(i, keys.monthly)))
  t.equal(monthly.filter(r => r.status === 200).length, M, `exactly ${M} calls of the monthly allowance across both replicas`)
  const refused = monthly.find(r => r.status === 429)!
  t.match(await refused.json(), { error: { code: 'allowance_exhausted' } })

  const rows = await db.selectFrom('usage_records').innerJoin('accounts', 'accounts.id', 'usage_records.account_id')
    .select(['accounts.email', 'status', 'prompt_tokens', 'completion_tokens']).execute()
  t.equal(rows.filter(r => r.email === 'perminute@example.com').length, N, 'one usage row per success, in the shared database')
  t.equal(rows.filter(r => r.email === 'monthly@example.com').length, M)
  t.same(
    rows.filter(r => r.email === 'perminute@example.com').map(r => [r.prompt_tokens, r.completion_tokens]).sort(),
    usages.map(u => [u.usage.prompt_tokens, u.usage.completion_tokens]).sort(),
    'the rows carry the usage the responses reported'
  )
  // The dashboard: a form from one replica posts to the other (one cookie secret, from the shared
  // database), and the session it starts opens the dashboard on both (sessions live in PostgreSQL).
  const [a, b] = replicas.map(r => `http://127.0.0.1:${r.port}`)
  const form = await fetch(`${a}/api/register`)
  const csrfCookie = form.headers.getSetCookie().map(c => c.split(';')[0]).join('; ')
  const token = /name="_csrf" value="([^"]+)"/.exec(await form.text())![1]
  const registered = await fetch(`${b}/api/register`, {
    method: 'POST',
    redirect: 'manual',
    headers: { cookie: csrfCookie, 'content-type': 'application/x-www-form-urlencoded' },
    body: new URLSearchParams({ _csrf: token, email: 'web@example.com', password: 'web password', confirm: 'web password' }),
  })
  t.equal(registered.status, 303, 'a CSRF token made by one replica is accepted by the other')
  const session = registered.headers.getSetCookie().find(c => c.startsWith('chatd_session='))!.split(';')[0]
  for (const origin of [a, b]) {
    const home = await fetch(`${origin}/api`, { headers: { cookie: session }, redirect: 'manual' })
    t.equal(home.status, 200, `the session works on ${origin === a ? 'the first' : 'the second'} replica`)
  }

  for (const { port } of replicas) {
    const report = await (await fetch(`http://127.0.0.1:${port}/api/v1/usage`, { headers: { authorization: `Bearer ${keys.monthly}` } })).json() as { used: { calls_this_month: number }; remaining: { calls_this_month: number } }
    t.match(report, { used: { calls_this_month: M }, remaining: { calls_this_month: 0 } }, 'both replicas report the same allowance')
  }
})
