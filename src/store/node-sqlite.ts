// Kysely's SqliteDialect expects a better-sqlite3-like database. docs/design.md names
// better-sqlite3, but it is a native addon: npm here blocks install scripts and
// node-gyp would build it against the wrong Node headers. Node 24 ships SQLite
// as `node:sqlite`, so this adapter gives its DatabaseSync the small surface
// Kysely uses (prepare -> {reader, all, iterate, run}) and nothing needs building.

import { DatabaseSync, type SQLInputValue, type StatementSync } from 'node:sqlite'
import type { SqliteDatabase, SqliteStatement } from 'kysely'

/** node:sqlite binds only null, numbers, bigints, strings and bytes. */
function toSqlite (value: unknown): SQLInputValue {
  if (typeof value === 'boolean') return value ? 1 : 0
  if (value === undefined) return null
  if (value instanceof Date) return value.toISOString()
  return value as SQLInputValue
}

class NodeSqliteStatement implements SqliteStatement {
  readonly reader: boolean
  readonly #statement: StatementSync

  constructor (statement: StatementSync) {
    this.#statement = statement
    // A statement returns rows exactly when it has result columns (SELECT, ... RETURNING).
    this.reader = statement.columns().length > 0
  }

  all (parameters: ReadonlyArray<unknown>): unknown[] {
    return this.#statement.all(...parameters.map(toSqlite))
  }

  iterate (parameters: ReadonlyArray<unknown>): IterableIterator<unknown> {
    return this.#statement.iterate(...parameters.map(toSqlite))
  }

  run (parameters: ReadonlyArray<unknown>): { changes: number | bigint; lastInsertRowid: number | bigint } {
    return this.#statement.run(...parameters.map(toSqlite))
  }
}

export class NodeSqliteDatabase implements SqliteDatabase {
  readonly #db: DatabaseSync

  constructor (path: string) {
    this.#db = new DatabaseSync(path)
    // WAL lets the CLI write keys while a server reads; busy_timeout makes the
    // rare write-write overlap wait instead of failing with SQLITE_BUSY.
    this.#db.exec('PRAGMA journal_mode = WAL')
    // FULL (SQLite's default here, set so it stays deliberate): every commit syncs the
    // WAL, so a committed usage row or key survives power loss, not only a crash of
    // this process (which WAL survives at any setting: the write has reached the OS).
    // NORMAL would save one fsync per commit and may lose the last commits on power loss.
    this.#db.exec('PRAGMA synchronous = FULL')
    this.#db.exec('PRAGMA busy_timeout = 5000')
    this.#db.exec('PRAGMA foreign_keys = ON')
  }

  prepare (sql: string): SqliteStatement {
    return new NodeSqliteStatement(this.#db.prepare(sql))
  }

  close (): void {
    if (this.#db.isOpen) this.#db.close()
  }
}
