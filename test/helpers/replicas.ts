// Two apps on one database and one throwaway Redis, as two replicas of a
// deployment are: for the tests that a count kept in Redis is shared. An
// account with a key is made before they start. Undefined when Redis is
// missing (throwawayRedis has already failed or skipped the test).

import { join } from 'node:path'
import type { Test } from 'tap'
import type { FastifyInstance } from 'fastify'
import type { Redis } from 'ioredis'
import { Accounts, type Account } from '../../src/accounts/accounts.ts'
import { buildApp } from '../../src/app.ts'
import { loadConfig } from '../../src/config.ts'
import { ModelRegistry } from '../../src/engine/registry.ts'
import { openMigratedDatabase } from '../../src/store/database.ts'
import { ScriptedBackend } from './scripted-backend.ts'
import { throwawayRedis } from './services.ts'

export interface Replicas {
  apps: [FastifyInstance, FastifyInstance]
  redis: { url: string; prefix: string; redis: Redis }
  accounts: Accounts
  account: Account
  key: string
}

export async function twoReplicasOnRedis (t: Test, opts: {
  env?: Record<string, string>
  /** A tiers file's JSON text; the shipped tiers.json when absent. */
  tiers?: string
  /** The account's tier; the tiers file's default when absent. */
  tier?: string
} = {}): Promise<Replicas | undefined> {
  const redis = await throwawayRedis(t)
  if (!redis) return undefined
  const dir = t.testdir(opts.tiers === undefined ? {} : { 'tiers.json': opts.tiers })
  const config = loadConfig({
    DATABASE_URL: `sqlite://${join(dir, 'chatd.db')}`,
    LOG_LEVEL: 'silent',
    REDIS_URL: redis.url,
    REDIS_PREFIX: redis.prefix,
    ...(opts.tiers === undefined ? {} : { TIERS_FILE: join(dir, 'tiers.json') }),
    ...opts.env,
  })
  const db = await openMigratedDatabase(config.database)
  t.teardown(() => db.destroy())
  const accounts = new Accounts(db)
  const account = await accounts.create({ email: 'a@example.com', ...(opts.tier === undefined ? {} : { tier: opts.tier }) })
  const { key } = await accounts.createKey(account.id)
  const build = () => buildApp({ config, accounts, models: new ModelRegistry([{ id: 'scripted', backend: new ScriptedBackend() }]), logger: false })
  const apps: [FastifyInstance, FastifyInstance] = [await build(), await build()]
  t.teardown(() => Promise.all(apps.map(app => app.close())))
  return { apps, redis, accounts, account, key }
}
