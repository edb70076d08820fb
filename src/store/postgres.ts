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

export function postgresDialect (url: string, opts: { maxConnections?: number } = {}): PostgresDialect {
  return new PostgresDialect({
    pool: new pg.Pool({
      connectionString: url,
      max: opts.maxConnections ?? 10,
      // Fail a start-up against an unreachable server in seconds, not minutes.
      connectionTimeoutMillis: 10000,
    }),
  })
}
