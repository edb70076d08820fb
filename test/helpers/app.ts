// Builds a chatd app for one test: a real SQLite file in the test's own temp
// directory, an account with a key, and the given backends in the registry.
// Closed automatically when the test ends. The account is on the shipped
// tiers.json's `unlimited` tier unless the test asks for another (and may
// bring its own tiers file), and refused requests are not metered unless the
// test sets REFUSED_PER_*, so tests about other things never meet a limit.

import { join } from 'node:path'
import type { Test } from 'tap'
import type { FastifyInstance } from 'fastify'
import { Accounts, type Account } from '../../src/accounts/accounts.ts'
import { Tiers } from '../../src/accounts/tiers.ts'
import { UsageRecords } from '../../src/accounts/usage-records.ts'
import { buildApp, type AppOptions } from '../../src/app.ts'
import { Metrics } from '../../src/api/metrics/metrics.ts'
import { loadConfig, type Config } from '../../src/config.ts'
import type { Backend } from '../../src/engine/backend.ts'
import type { ReasoningMode } from '../../src/engine/models-file.ts'
import { ModelRegistry } from '../../src/engine/registry.ts'
import { Limiter } from '../../src/limits/limiter.ts'
import { MemoryLimitStore } from '../../src/limits/memory-store.ts'
import { openMigratedDatabase, type Db } from '../../src/store/database.ts'
import { ScriptedBackend } from './scripted-backend.ts'

export interface TestApp {
  app: FastifyInstance
  db: Db
  accounts: Accounts
  models: ModelRegistry
  metrics: Metrics
  config: Config
  limiter: Limiter
  usage: UsageRecords
  /** user@example.com, on the `unlimited` tier unless opts.tier says otherwise. */
  account: Account
  /** A working key of that account. */
  key: string
  /** Authorization header for `key`. */
  auth: { authorization: string }
}

export async function buildTestApp (t: Test, opts: {
  backends?: Array<Backend | { backend: Backend; reasoning?: ReasoningMode; systemPrompt?: 'system' | 'user' }>
  env?: Record<string, string>
  /** The test account's tier. */
  tier?: string
  /** A tiers file's JSON text; the shipped tiers.json when absent. */
  tiers?: string
  /** Told of every route the app registers. */
  onRoute?: AppOptions['onRoute']
  /** The limit store's clock (Date.now when absent): a test that checks reset times fixes it. */
  limitsNow?: () => number
} = {}): Promise<TestApp> {
  const dir = t.testdir()
  // Refused requests are not metered unless a test asks: many tests send one bad request after another.
  const config = loadConfig({ DATABASE_URL: `sqlite://${join(dir, 'chatd.db')}`, LOG_LEVEL: 'silent', REFUSED_PER_KEY_PER_MINUTE: '0', REFUSED_PER_ADDRESS_PER_MINUTE: '0', ...opts.env })
  const db = await openMigratedDatabase(config.database)
  const accounts = new Accounts(db)
  const account = await accounts.create({ email: 'user@example.com', tier: opts.tier ?? 'unlimited' })
  const { key } = await accounts.createKey(account.id, { name: 'test' })
  const backends = opts.backends ?? [new ScriptedBackend()]
  const models = new ModelRegistry(backends.map(b => 'backend' in b ? { id: b.backend.id, backend: b.backend, reasoning: b.reasoning, systemPrompt: b.systemPrompt } : { id: b.id, backend: b }))
  const metrics = new Metrics({ familyPrefix: config.metrics.familyPrefix, accountsTop: config.metrics.accountsTop })
  const usage = new UsageRecords(db)
  const tiers = opts.tiers === undefined ? Tiers.fromFile(config.tiersFile) : Tiers.parse(opts.tiers)
  const limiter = new Limiter({ tiers, store: new MemoryLimitStore({ now: opts.limitsNow }), usage })
  const app = await buildApp({ config, accounts, models, metrics, limiter, logger: false, onRoute: opts.onRoute })
  t.teardown(async () => {
    await app.close()
    await db.destroy()
  })
  return { app, db, accounts, models, metrics, config, limiter, usage, account, key, auth: { authorization: `Bearer ${key}` } }
}

/** A minimal valid chat body for the scripted model. */
export function chatBody (extra: Record<string, unknown> = {}): Record<string, unknown> {
  return { model: 'scripted', messages: [{ role: 'user', content: 'Tell me a story' }], ...extra }
}
