// Picks where the limits live: in this process (default, one server) or in
// Redis (REDIS_URL, several replicas). The Redis connection is also handed out
// for the dashboard's log-in throttle, so one connection serves both.

import { Redis } from 'ioredis'
import { ConfigError, type Config } from '../config.ts'
import { MemoryLimitStore } from './memory-store.ts'
import { RedisLimitStore } from './redis-store.ts'
import type { LimitStore } from './store.ts'

export interface OpenedLimits {
  store: LimitStore
  /** The shared connection when REDIS_URL is set. */
  redis?: Redis
  /** Closes the store and the connection. */
  close (): Promise<void>
}

/** The longest pause between two attempts to reconnect to Redis. */
export const RECONNECT_MAX_MS = 1000

/** Connects to REDIS_URL, failing within seconds (and without echoing the URL's password) when it cannot. */
export async function connectRedis (url: string): Promise<Redis> {
  const redis = new Redis(url, {
    lazyConnect: true,
    // A request waits at most this long on Redis before failing with 503, instead of hanging.
    commandTimeout: 2000,
    maxRetriesPerRequest: 1,
    connectTimeout: 5000,
    // While the connection is down (Redis restarting), a command fails at once
    // instead of waiting in a queue for the next reconnect attempt (up to 2 s
    // apart): the request gets its 503 and Retry-After without delay.
    enableOfflineQueue: false,
    // Reconnect at least every second: ioredis's default backs off to 5 s, so after
    // a Redis restart every request would still be refused for up to 5 s more.
    retryStrategy: times => Math.min(50 * 2 ** (times - 1), RECONNECT_MAX_MS) + Math.floor(Math.random() * 100),
  })
  // Without a listener ioredis reports each reconnect attempt as an unhandled error event.
  redis.on('error', () => {})
  try {
    await redis.connect()
    await redis.ping()
  } catch (err) {
    redis.disconnect()
    const { host } = new URL(url)
    throw new ConfigError(`REDIS_URL: cannot connect to Redis at ${host}: ${(err as Error).message}`)
  }
  return redis
}

export async function openLimitStore (config: Pick<Config, 'redisUrl' | 'redisPrefix'>): Promise<OpenedLimits> {
  if (config.redisUrl === undefined) {
    const store = new MemoryLimitStore()
    return { store, close: () => store.close() }
  }
  const redis = await connectRedis(config.redisUrl)
  const store = new RedisLimitStore(redis, { prefix: config.redisPrefix, ownsConnection: true })
  return { store, redis, close: () => store.close() }
}
