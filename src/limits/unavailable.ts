// Which failures mean "Redis cannot be reached right now". The limiter wraps
// its own calls (limiter.ts, fromStore); this names the raw ioredis errors that
// reach a handler by other paths (the dashboard's log-in throttle counts in the
// same Redis through @fastify/rate-limit), so they too become 503
// limits_unavailable rather than a 500, and the attempt is refused, not let
// through uncounted.

import { ApiError } from '../errors.ts'

const NETWORK_CODES = new Set(['ECONNREFUSED', 'ECONNRESET', 'ETIMEDOUT', 'EPIPE', 'EHOSTUNREACH', 'ENETUNREACH', 'ENOTFOUND', 'EAI_AGAIN'])

/** ioredis's messages for a lost connection, a command that waited past commandTimeout, and its retry limit. */
const CLIENT_MESSAGES = [/^Connection is closed\.$/, /^Command timed out$/, /^Reached the max retries per request limit/, /^Stream isn't writeable/]

/** Replies of a Redis that is up but cannot serve yet (loading its data, a failover, a long script). */
const SERVER_REPLIES = /^(LOADING|MASTERDOWN|READONLY|CLUSTERDOWN|TRYAGAIN|BUSY) /

export function isRedisUnavailable (err: unknown): boolean {
  if (!(err instanceof Error)) return false
  const code = (err as { code?: unknown }).code
  if (typeof code === 'string' && NETWORK_CODES.has(code)) return true
  if (err.name === 'MaxRetriesPerRequestError') return true
  return CLIENT_MESSAGES.some(pattern => pattern.test(err.message)) || SERVER_REPLIES.test(err.message)
}

export function limitsUnavailableError (cause?: unknown): ApiError {
  return Object.assign(
    new ApiError('limits_unavailable', 'Rate limits cannot be checked right now; retry shortly.', { headers: { 'retry-after': '1' } }),
    { cause }
  )
}
