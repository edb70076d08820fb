// Which database failures mean "the database cannot be reached right now"
// (restarting, unreachable, out of connections or disk, locked) rather than "this
// query is wrong". Those become 503 database_unavailable with Retry-After, which
// tells clients to come back, instead of a 500 that says chatd is broken.

import { ApiError } from '../errors.ts'

/** Socket-level failures: the server is gone, refusing, or unreachable. */
const NETWORK_CODES = new Set(['ECONNREFUSED', 'ECONNRESET', 'ETIMEDOUT', 'EPIPE', 'EHOSTUNREACH', 'ENETUNREACH', 'ENOTFOUND', 'EAI_AGAIN'])

/**
 * SQLSTATE: 08 connection exception (class), 53 insufficient resources
 * (class: too many connections, disk full, out of memory), 57P01-03 the
 * server shutting down, crashed or starting up, 57014 statement timeout,
 * 25006 read-only transaction (a failover left us on a standby).
 */
function pgUnavailable (sqlState: string): boolean {
  return sqlState.startsWith('08') || sqlState.startsWith('53') || ['57P01', '57P02', '57P03', '57014', '25006'].includes(sqlState)
}

/** pg's own errors for a connection it lost or could not make in time (they carry no code). */
const PG_CONNECTION_MESSAGES = [
  /^Connection terminated/,
  /timeout exceeded when trying to connect/,
  /^Query read timeout$/,
  /is not queryable/,
]

/** SQLite primary result codes: BUSY, LOCKED (another writer past busy_timeout), IOERR, FULL, CANTOPEN. */
const SQLITE_UNAVAILABLE = new Set([5, 6, 10, 13, 14])

export function isDatabaseUnavailable (err: unknown, depth = 0): boolean {
  if (!(err instanceof Error) || depth > 4) return false
  const e = err as Error & { code?: unknown; errcode?: unknown; errors?: unknown[] }
  if (typeof e.code === 'string') {
    if (NETWORK_CODES.has(e.code)) return true
    if (/^[0-9A-Z]{5}$/.test(e.code) && pgUnavailable(e.code)) return true
  }
  // node:sqlite: code ERR_SQLITE_ERROR and the SQLite result code (extended codes keep the primary one in the low byte).
  if (e.code === 'ERR_SQLITE_ERROR' && typeof e.errcode === 'number' && SQLITE_UNAVAILABLE.has(e.errcode & 0xff)) return true
  if (PG_CONNECTION_MESSAGES.some(pattern => pattern.test(e.message))) return true
  // Connecting to a name with several addresses fails with an AggregateError of each attempt.
  if (Array.isArray(e.errors) && e.errors.some(inner => isDatabaseUnavailable(inner, depth + 1))) return true
  return isDatabaseUnavailable(e.cause, depth + 1)
}

export function databaseUnavailableError (cause?: unknown): ApiError {
  return Object.assign(
    new ApiError('database_unavailable', 'The database cannot be reached right now; retry shortly.', { headers: { 'retry-after': '1' } }),
    { cause }
  )
}
