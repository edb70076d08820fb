// Opens the database named by DATABASE_URL (a SQLite file, or PostgreSQL for
// several replicas) and brings its schema up to date. On PostgreSQL, Kysely's
// migrator holds an advisory lock, so replicas starting together migrate once.

import { mkdirSync } from 'node:fs'
import { dirname } from 'node:path'
import { Kysely, Migrator, SqliteDialect, type MigrationProvider } from 'kysely'
import type { Config } from '../config.ts'
import { migrations } from './migrations/index.ts'
import { NodeSqliteDatabase } from './node-sqlite.ts'
import { DEFAULT_DATABASE_TIMEOUT_MS, postgresDialect, type PostgresOptions } from './postgres.ts'
import type { Database } from './schema.ts'

export type Db = Kysely<Database>

/** How the server's PostgreSQL pool behaves when the database goes away (ignored for SQLite). */
export type DatabaseOptions = Pick<PostgresOptions, 'timeoutMs' | 'onIdleError'>

export function openDatabase (database: Config['database'], opts: DatabaseOptions = {}): Db {
  if (database.kind === 'postgres') {
    return new Kysely<Database>({ dialect: postgresDialect(database.url, opts) })
  }
  if (database.path !== ':memory:') mkdirSync(dirname(database.path), { recursive: true })
  return new Kysely<Database>({
    dialect: new SqliteDialect({ database: new NodeSqliteDatabase(database.path) }),
  })
}

const provider: MigrationProvider = { getMigrations: async () => migrations }

/** Applies every pending migration; throws with the failing migration's name. */
export async function migrateToLatest (db: Db): Promise<void> {
  const { error, results } = await new Migrator({ db, provider }).migrateToLatest()
  if (error) {
    const failed = results?.find(r => r.status === 'Error')?.migrationName ?? 'unknown'
    throw new Error(`database migration ${failed} failed: ${(error as Error).message ?? String(error)}`, { cause: error })
  }
}

/** openDatabase + migrateToLatest: what the server and the CLI call. */
export async function openMigratedDatabase (database: Config['database'], opts: DatabaseOptions = {}): Promise<Db> {
  if (database.kind === 'postgres' && (opts.timeoutMs ?? DEFAULT_DATABASE_TIMEOUT_MS) > 0) {
    // Migrations may run longer than a request's query timeout (an index over a big
    // table, waiting on another replica's migration lock), so they get a pool without one.
    const migrating = openDatabase(database, { ...opts, timeoutMs: 0 })
    try {
      await migrateToLatest(migrating)
    } finally {
      await migrating.destroy()
    }
    return openDatabase(database, opts)
  }
  const db = openDatabase(database, opts)
  try {
    await migrateToLatest(db)
  } catch (err) {
    await db.destroy()
    throw err
  }
  return db
}
