// What the dashboard's plugin and its routes share, apart from the plugin
// itself (routes import this, never plugin.ts: no cycle).

import type { Redis } from 'ioredis'
import type { Accounts } from '../accounts/accounts.ts'
import type { Sessions } from '../accounts/sessions.ts'
import type { UsageRecords } from '../accounts/usage-records.ts'
import type { Config } from '../config.ts'
import type { ModelRegistry } from '../engine/registry.ts'
import type { Limiter } from '../limits/limiter.ts'
import type { Db } from '../store/database.ts'

export interface DashboardOptions {
  accounts: Accounts
  sessions: Sessions
  limiter: Limiter
  usage: UsageRecords
  db: Db
  /** The models, for the new-key page's examples (which name a ready one). */
  models: Pick<ModelRegistry, 'list' | 'state'>
  config: Pick<Config, 'registration' | 'cookieSecure' | 'loginAttemptsPerMinute' | 'sessionSecret' | 'redisPrefix' | 'keyAllowance'>
  /** The shared connection when REDIS_URL is set: the log-in throttle counts there, across replicas. */
  redis?: Redis
}

export type DashboardDeps = DashboardOptions & { loginLimit: { max: number; timeWindow: number } }
