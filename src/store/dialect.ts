// Which SQL dialect a Kysely instance runs on. Migrations and a few queries
// spell things differently per dialect (auto-numbered keys); this is the one
// place that asks.

import { PostgresAdapter, type Kysely } from 'kysely'

export function isPostgres (db: Kysely<any>): boolean {
  return db.getExecutor().adapter instanceof PostgresAdapter
}
