// Opens the database named by DATABASE_URL (a SQLite file, or PostgreSQL for
// several replicas) and brings its schema up to date. On PostgreSQL, Kysely's
// migrator holds an advisory lock, so replicas starting together migrate once.

import { mkdirSync } from 'node:fs'
import { dirname } from 'node:path'
import { Kysely, Migrator, SqliteDialect, type MigrationProvider } from 'kysely'
import type { Config } from '../config.ts'
import { migrations } from './migrations/index.ts'
import { NodeSqliteDatabase } from './node-sqlite.ts'
import { postgresDialect } from './postgres.ts'
import type { Database } from './schema.ts'

export type Db = Kysely<Database>

export function openDatabase (database: Config['database']): Db {
  if (database.kind === 'postgres') {
    return new Kysely<Database>({ dialect: postgresDialect(database.url) })
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
export async function openMigratedDatabase (database: Config['database']): Promise<Db> {
  const db = openDatabase(database)
  try {
    await migrateToLatest(db)
  } catch (err) {
    await db.destroy()
    throw err
  }
  return db
}
