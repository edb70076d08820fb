// The PostgreSQL side of the store, for running several chatd replicas on one
// database. `pg` is pure JavaScript, so nothing needs building. Kysely speaks
// to it through a connection pool; the same migrations and queries run here as
// on SQLite because every table is written with Kysely's schema builder and
// timestamps are ISO-8601 text on both.

import pg from 'pg'
import { PostgresDialect } from 'kysely'

// pg returns int8 (COUNT(*), SUM over integers) as strings so no precision is
// lost past 2^53. chatd's counts and token sums stay far below that, and the
// rest of the code expects numbers as SQLite gives them, so parse them here.
pg.types.setTypeParser(pg.types.builtins.INT8, value => Number(value))
pg.types.setTypeParser(pg.types.builtins.NUMERIC, value => Number(value))

export const DEFAULT_DATABASE_TIMEOUT_MS = 10_000

export interface PostgresOptions {
  maxConnections?: number
  /**
   * How long one connection attempt, and one query, may take before it fails
   * (DATABASE_TIMEOUT_MS). A request then gets 503 database_unavailable instead
   * of hanging on a server that went away without closing its connections (a
   * network partition, a frozen host). 0: no query timeout, for migrations,
   * which may legitimately run long; connecting stays bounded.
   */
  timeoutMs?: number
  /** Told about errors of idle pooled connections (the server restarted, or ended them). */
  onIdleError?: (err: Error) => void
}

export function postgresDialect (url: string, opts: PostgresOptions = {}): PostgresDialect {
  const timeoutMs = opts.timeoutMs ?? DEFAULT_DATABASE_TIMEOUT_MS
  const pool = new pg.Pool({
    connectionString: url,
    max: opts.maxConnections ?? 10,
    connectionTimeoutMillis: timeoutMs || DEFAULT_DATABASE_TIMEOUT_MS,
    // Client-side: ends the wait even when no answer can come back. statement_timeout
    // (server-side) makes PostgreSQL stop the work too, so timed-out queries do not pile up.
    ...(timeoutMs > 0 ? { query_timeout: timeoutMs, statement_timeout: timeoutMs } : {}),
    // Probes idle connections so one the network silently dropped is noticed and replaced.
    keepAlive: true,
  })
  // An idle pooled connection that the server ends (a restart, pg_terminate_backend)
  // makes the pool emit 'error'; with no listener, Node turns that into an uncaught
  // exception and the whole process dies. The pool has already discarded the
  // connection and opens a fresh one on the next query, so noting it is enough.
  pool.on('error', err => opts.onIdleError?.(err))
  // The same holds for a connection that is checked out: the pool listens only to
  // idle ones, so a connection reset in the middle of a query (or between two queries
  // of one request) made its client emit an 'error' nobody heard, and chatd died of
  // it. The query in progress receives that error itself (a 503 for its request), and
  // the pool discards the client when it comes back unusable; the event needs no more.
  pool.on('connect', client => { client.on('error', () => {}) })
  return new PostgresDialect({ pool })
}
