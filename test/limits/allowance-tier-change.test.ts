// The monthly allowance across tier changes and restarts, through the HTTP API,
// on SQLite with the in-process limits and on PostgreSQL with Redis: every call
// is counted whatever the tier, so moving an account to a tier without an
// allowance and back cannot reset it; GET /api/v1/usage's calls_this_month is
// the limiter's count; a restart with no calls changes nothing; a failed call
// gets its call back (it stays in daily.calls, which counts every row).

import { writeFileSync } from 'node:fs'
import { join } from 'node:path'
import t from 'tap'
import { Accounts } from '../../src/accounts/accounts.ts'
import { buildApp } from '../../src/app.ts'
import { loadConfig } from '../../src/config.ts'
import { ModelRegistry } from '../../src/engine/registry.ts'
import { openMigratedDatabase } from '../../src/store/database.ts'
import { chatBody } from '../helpers/app.ts'
import { testDatabase } from '../helpers/databases.ts'
import { ScriptedBackend } from '../helpers/scripted-backend.ts'
import { throwawayRedis } from '../helpers/services.ts'

const CHAT = '/api/v1/chat/completions'
const TIERS = JSON.stringify({ default: 'monthly', tiers: { monthly: { calls_per_month: 2 }, unlimited: {} } })

for (const kind of ['sqlite + in-process limits', 'postgres + redis'] as const) {
  t.test(`an allowance survives a move to an unlimited tier and back, and a restart [${kind}]`, async t => {
    const where = await testDatabase(t, kind === 'postgres + redis' ? 'postgres' : 'sqlite')
    if (!where) return
    let redis: { url: string; prefix: string } | undefined
    if (kind === 'postgres + redis') {
      redis = await throwawayRedis(t)
      if (!redis) return
    }
    const dir = t.testdir()
    writeFileSync(join(dir, 'tiers.json'), TIERS)
    const config = loadConfig({
      DATABASE_URL: where.kind === 'sqlite' ? `sqlite://${where.path}` : where.url,
      TIERS_FILE: join(dir, 'tiers.json'),
      LOG_LEVEL: 'silent',
      REFUSED_PER_KEY_PER_MINUTE: '0',
      REFUSED_PER_ADDRESS_PER_MINUTE: '0',
      ...(redis ? { REDIS_URL: redis.url, REDIS_PREFIX: redis.prefix } : {}),
    })
    const db = await openMigratedDatabase(config.database)
    t.teardown(() => db.destroy())
    const accounts = new Accounts(db)
    const account = await accounts.create({ email: 'user@example.com', tier: 'monthly' })
    const { key } = await accounts.createKey(account.id)
    const auth = { authorization: `Bearer ${key}` }

    /** One server process's app over the shared database (and Redis): a restart is a new one. */
    async function start (backend = new ScriptedBackend()) {
      const models = new ModelRegistry([{ id: backend.id, backend }])
      const app = await buildApp({ config, accounts, models, logger: false })
      return app
    }
    async function report (app: Awaited<ReturnType<typeof start>>) {
      const res = await app.inject({ url: '/api/v1/usage', headers: auth })
      t.equal(res.statusCode, 200)
      const body = res.json()
      return { month: body.used.calls_this_month as number, remaining: body.remaining.calls_this_month as number | null, today: body.daily.at(-1).calls as number }
    }
    const call = async (app: Awaited<ReturnType<typeof start>>) => (await app.inject({ method: 'POST', url: CHAT, headers: auth, payload: chatBody() })).statusCode

    let app = await start()
    t.equal(await call(app), 200, 'the first of two calls')
    await accounts.setTier(account.id, 'unlimited')
    for (let i = 0; i < 4; i++) t.equal(await call(app), 200, 'unlimited: no allowance to refuse')
    t.same(await report(app), { month: 5, remaining: null, today: 5 }, 'calls on the unlimited tier count too')
    await accounts.setTier(account.id, 'monthly')
    const refused = await app.inject({ method: 'POST', url: CHAT, headers: auth, payload: chatBody() })
    t.equal(refused.statusCode, 429, 'back on 2 calls a month: 5 made, none left')
    t.equal(refused.json().error.code, 'allowance_exhausted')
    t.same(await report(app), { month: 5, remaining: 0, today: 5 }, 'the limiter and the report agree')
    await app.close()

    app = await start()
    t.same(await report(app), { month: 5, remaining: 0, today: 5 }, 'a restart with no calls changes nothing')
    t.equal(await call(app), 429, 'and still refuses')
    await app.close()

    // A failed call gives its call back: counted in daily.calls (a row), not in the month.
    await accounts.setTier(account.id, 'unlimited')
    app = await start(new ScriptedBackend({ failAfter: { deltas: 0, error: new Error('the model broke') } }))
    t.equal(await call(app), 500)
    t.same(await report(app), { month: 5, remaining: null, today: 6 })
    await app.close()
    app = await start()
    t.same(await report(app), { month: 5, remaining: null, today: 6 }, 'and after a restart')
    await app.close()
  })
}
