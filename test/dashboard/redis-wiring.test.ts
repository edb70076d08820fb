// REDIS_URL as the server wires it: buildApp opens the Redis limit store, and
// two apps (two replicas) on one Redis share both the API limits and the
// dashboard's log-in throttle.

import { join } from 'node:path'
import t from 'tap'
import { Accounts } from '../../src/accounts/accounts.ts'
import { buildApp } from '../../src/app.ts'
import { loadConfig } from '../../src/config.ts'
import { ModelRegistry } from '../../src/engine/registry.ts'
import { openMigratedDatabase } from '../../src/store/database.ts'
import { chatBody } from '../helpers/app.ts'
import { ScriptedBackend } from '../helpers/scripted-backend.ts'
import { throwawayRedis } from '../helpers/services.ts'
import { Browser, csrfToken } from './jar.ts'

t.test('two apps on one Redis: one requests-per-minute count, one log-in throttle', async t => {
  const redis = await throwawayRedis(t)
  if (!redis) return
  const dir = t.testdir({ 'tiers.json': JSON.stringify({ tiers: { free: { requests_per_minute: 3 } } }) })
  const config = loadConfig({
    DATABASE_URL: `sqlite://${join(dir, 'chatd.db')}`,
    LOG_LEVEL: 'silent',
    TIERS_FILE: join(dir, 'tiers.json'),
    REDIS_URL: redis.url,
    REDIS_PREFIX: redis.prefix,
    LOGIN_ATTEMPTS_PER_MINUTE: '2',
  })
  const db = await openMigratedDatabase(config.database)
  t.teardown(() => db.destroy())
  const accounts = new Accounts(db)
  const account = await accounts.create({ email: 'a@example.com' })
  const { key } = await accounts.createKey(account.id)
  const apps = await Promise.all([0, 1].map(() => buildApp({ config, accounts, models: new ModelRegistry([{ id: 'scripted', backend: new ScriptedBackend() }]), logger: false })))
  t.teardown(() => Promise.all(apps.map(app => app.close())))

  const statuses = []
  for (let i = 0; i < 6; i++) {
    statuses.push((await apps[i % 2].inject({ method: 'POST', url: '/api/v1/chat/completions', headers: { authorization: `Bearer ${key}` }, payload: chatBody() })).statusCode)
  }
  t.same(statuses, [200, 200, 200, 429, 429, 429], '3 per minute across both apps')
  const stored = await redis.redis.keys(`${redis.prefix}*`)
  t.ok(stored.some(k => k === `${redis.prefix}{a:${account.id}}:win`), 'the window lives in Redis under REDIS_PREFIX')

  const logins = []
  for (let i = 0; i < 4; i++) {
    const browser = new Browser(apps[i % 2])
    const token = csrfToken((await browser.get('/api/login')).body)
    logins.push((await browser.post('/api/login', { email: 'a@example.com', password: `guess ${i}`, _csrf: token })).statusCode)
  }
  t.same(logins, [401, 401, 429, 429], 'log-in attempts are counted once across both apps')
  t.ok((await redis.redis.keys(`${redis.prefix}login:*`)).length > 0, 'in Redis')
})
