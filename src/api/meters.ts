// The per-minute meters of the API that are not the tier's limits: refused
// requests (refusals.ts) and reads that count against no tier limit
// (reads.ts). One @fastify/rate-limit registration serves both (it decorates
// its context once), kept in Redis under REDIS_PREFIX + "meter:" when REDIS_URL
// is set, so replicas share each count.

import type { FastifyInstance } from 'fastify'
import rateLimit from '@fastify/rate-limit'
import type { Redis } from 'ioredis'

/** Every meter counts per minute. */
const METER_WINDOW_MS = 60_000

export async function registerMeters (api: FastifyInstance, opts: { redis?: Redis; redisPrefix?: string } = {}): Promise<void> {
  await api.register(rateLimit, {
    global: false,
    timeWindow: METER_WINDOW_MS,
    // With Redis down the meters let requests through rather than refusing
    // every one: what they guard is cost, and the tier limits still refuse.
    skipOnError: true,
    ...(opts.redis ? { redis: opts.redis, nameSpace: `${opts.redisPrefix ?? 'chatd:'}meter:` } : {}),
  })
}
