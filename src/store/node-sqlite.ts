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
  readonly #fresh: () => StatementSync

  constructor (statement: StatementSync, fresh: () => StatementSync) {
    this.#statement = statement
    this.#fresh = fresh
    // A statement returns rows exactly when it has result columns (SELECT, ... RETURNING).
    this.reader = statement.columns().length > 0
  }

  all (parameters: ReadonlyArray<unknown>): unknown[] {
    return this.#statement.all(...parameters.map(toSqlite))
  }

  iterate (parameters: ReadonlyArray<unknown>): IterableIterator<unknown> {
    // An iterator holds its statement until it is done, and two may be open at once
    // (a stream awaits between rows): each gets a statement of its own, never the shared one.
    return this.#fresh().iterate(...parameters.map(toSqlite))
  }

  run (parameters: ReadonlyArray<unknown>): { changes: number | bigint; lastInsertRowid: number | bigint } {
    return this.#statement.run(...parameters.map(toSqlite))
  }
}

/**
 * Prepared statements kept for reuse, by their SQL text. Kysely prepares every query anew, and on
 * SQLite preparing costs more than running a short query (an API key's look-up, on every request).
 * The queries are the code's own, parameters bound, so their texts are few; the bound is for the
 * ones whose text grows with a list (`IN (?, ?, ...)`). Least recently used goes first.
 */
const STATEMENTS_KEPT = 256

export class NodeSqliteDatabase implements SqliteDatabase {
  readonly #db: DatabaseSync
  readonly #statements = new Map<string, NodeSqliteStatement>()

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
    const kept = this.#statements.get(sql)
    if (kept !== undefined) {
      // Map order is insertion order: moved to the end, it is the most recently used.
      this.#statements.delete(sql)
      this.#statements.set(sql, kept)
      return kept
    }
    const statement = new NodeSqliteStatement(this.#db.prepare(sql), () => this.#db.prepare(sql))
    this.#statements.set(sql, statement)
    if (this.#statements.size > STATEMENTS_KEPT) this.#statements.delete(this.#statements.keys().next().value!)
    return statement
  }

  /** How many prepared statements are kept (for tests). */
  get statementsKept (): number {
    return this.#statements.size
  }

  close (): void {
    this.#statements.clear()
    if (this.#db.isOpen) this.#db.close()
  }
}
