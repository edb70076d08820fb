// The real PostgreSQL and Redis servers the scale-out tests run against
// (127.0.0.1:5432 and :6379 by default; TEST_POSTGRES_URL / TEST_REDIS_URL
// override). Each test gets its own throwaway database or key prefix and
// cleans it up. Where a server is not reachable the test is skipped with the
// reason, unless CHATD_REQUIRE_SERVICES=1 (CI sets it): then it fails, so a CI
// run can never pass by skipping them.

import { randomBytes } from 'node:crypto'
import { connect } from 'node:net'
import type { Test } from 'tap'
import pg from 'pg'
import { Redis } from 'ioredis'

export const POSTGRES_URL = process.env.TEST_POSTGRES_URL ?? 'postgres://postgres@127.0.0.1:5432/postgres'
export const REDIS_URL = process.env.TEST_REDIS_URL ?? 'redis://127.0.0.1:6379'
const REQUIRED = process.env.CHATD_REQUIRE_SERVICES === '1'

/** True when something accepts TCP connections at the URL's host and port within a second. */
async function reachable (url: string, defaultPort: number): Promise<boolean> {
  const { hostname, port } = new URL(url)
  return new Promise(resolve => {
    const socket = connect({ host: hostname || '127.0.0.1', port: Number(port || defaultPort) })
    const done = (ok: boolean): void => { socket.destroy(); resolve(ok) }
    socket.setTimeout(1000, () => done(false))
    socket.once('connect', () => done(true))
    socket.once('error', () => done(false))
  })
}

const cache = new Map<string, Promise<boolean>>()
function isUp (url: string, port: number): Promise<boolean> {
  if (!cache.has(url)) cache.set(url, reachable(url, port))
  return cache.get(url)!
}

/** Skips (or, with CHATD_REQUIRE_SERVICES=1, fails) the test; returns false when the service is missing. */
async function needService (t: Test, name: string, url: string, port: number): Promise<boolean> {
  if (await isUp(url, port)) return true
  const reason = `${name} is not reachable at ${new URL(url).host}`
  if (REQUIRED) t.fail(`${reason}, and CHATD_REQUIRE_SERVICES=1 says it must be`)
  else {
    const hint = `start it, or point ${name === 'PostgreSQL' ? 'TEST_POSTGRES_URL' : 'TEST_REDIS_URL'} at one`
    // Shows in tap's output as "# SKIP <reason>" and in the summary's skip count.
    t.pass(`${t.name} needs ${name}`, { skip: `${reason}; ${hint}` })
  }
  return false
}

export const postgresAvailable = (): Promise<boolean> => isUp(POSTGRES_URL, 5432)
export const redisAvailable = (): Promise<boolean> => isUp(REDIS_URL, 6379)

/**
 * A fresh database chatd_test_<random> on the PostgreSQL server, dropped when
 * the test ends. Returns its URL, or undefined when the test was skipped.
 */
export async function throwawayPostgres (t: Test): Promise<string | undefined> {
  if (!await needService(t, 'PostgreSQL', POSTGRES_URL, 5432)) return undefined
  const name = `chatd_test_${randomBytes(6).toString('hex')}`
  const admin = new pg.Client({ connectionString: POSTGRES_URL })
  await admin.connect()
  try {
    await admin.query(`CREATE DATABASE ${name}`)
  } finally {
    await admin.end()
  }
  t.teardown(async () => {
    const client = new pg.Client({ connectionString: POSTGRES_URL })
    await client.connect()
    // WITH (FORCE) ends connections a crashed test may have left open.
    await client.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`).finally(() => client.end())
  })
  const url = new URL(POSTGRES_URL)
  url.pathname = `/${name}`
  return url.toString()
}

/**
 * A Redis connection and a random key prefix for this test; every key under
 * the prefix is deleted when the test ends. Undefined when skipped.
 */
export async function throwawayRedis (t: Test): Promise<{ url: string; prefix: string; redis: Redis } | undefined> {
  if (!await needService(t, 'Redis', REDIS_URL, 6379)) return undefined
  const prefix = `chatd-test-${randomBytes(6).toString('hex')}:`
  const redis = new Redis(REDIS_URL, { lazyConnect: true, maxRetriesPerRequest: 1 })
  await redis.connect()
  t.teardown(async () => {
    let cursor = '0'
    do {
      const [next, keys] = await redis.scan(cursor, 'MATCH', `${prefix}*`, 'COUNT', 500)
      if (keys.length > 0) await redis.del(...keys)
      cursor = next
    } while (cursor !== '0')
    await redis.quit()
  })
  return { url: REDIS_URL, prefix, redis }
}
