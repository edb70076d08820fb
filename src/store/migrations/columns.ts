// Column spellings shared by migrations written after 001 (which keeps its own
// copy: a shipped migration is never edited).

import type { ColumnDefinitionBuilder, Kysely } from 'kysely'
import { isPostgres } from '../dialect.ts'

/** An auto-numbered primary key: serial on PostgreSQL, INTEGER PRIMARY KEY AUTOINCREMENT on SQLite. */
export function idColumn (db: Kysely<any>): ['serial' | 'integer', (col: ColumnDefinitionBuilder) => ColumnDefinitionBuilder] {
  return isPostgres(db)
    ? ['serial', col => col.primaryKey()]
    : ['integer', col => col.primaryKey().autoIncrement()]
}
