// Dashboard sessions, one usage row per API request, and a small settings
// table for values every replica must share (the cookie-signing secret when
// SESSION_SECRET is not set).

import type { Kysely, Migration } from 'kysely'
import { idColumn } from './columns.ts'

export const sessionsUsageSettings: Migration = {
  async up (db: Kysely<any>) {
    await db.schema.createTable('sessions')
      .addColumn('id', ...idColumn(db))
      .addColumn('account_id', 'integer', col => col.notNull().references('accounts.id').onDelete('cascade'))
      // SHA-256 of the cookie's random token: a leaked table cannot be replayed as cookies.
      .addColumn('token_hash', 'varchar(64)', col => col.notNull().unique())
      .addColumn('created_at', 'varchar(32)', col => col.notNull())
      .addColumn('expires_at', 'varchar(32)', col => col.notNull())
      .execute()
    await db.schema.createIndex('sessions_account_id').on('sessions').column('account_id').execute()

    await db.schema.createTable('usage_records')
      .addColumn('id', ...idColumn(db))
      .addColumn('account_id', 'integer', col => col.notNull().references('accounts.id').onDelete('cascade'))
      // The key's display prefix, not a foreign key: keys are revoked, never deleted, and the
      // record must read the same whatever happens to the key later.
      .addColumn('key_prefix', 'varchar(32)', col => col.notNull())
      .addColumn('model', 'varchar(200)', col => col.notNull())
      .addColumn('prompt_tokens', 'integer', col => col.notNull().defaultTo(0))
      .addColumn('completion_tokens', 'integer', col => col.notNull().defaultTo(0))
      // completed | cancelled (client went away) | failed
      .addColumn('status', 'varchar(16)', col => col.notNull())
      .addColumn('error_code', 'varchar(64)')
      .addColumn('latency_ms', 'integer', col => col.notNull())
      .addColumn('created_at', 'varchar(32)', col => col.notNull())
      .execute()
    // Daily totals and the month's call count read one account's recent rows.
    await db.schema.createIndex('usage_records_account_time').on('usage_records').columns(['account_id', 'created_at']).execute()

    await db.schema.createTable('settings')
      .addColumn('name', 'varchar(64)', col => col.primaryKey())
      .addColumn('value', 'text', col => col.notNull())
      .execute()
  },

  async down (db: Kysely<any>) {
    await db.schema.dropTable('settings').execute()
    await db.schema.dropTable('usage_records').execute()
    await db.schema.dropTable('sessions').execute()
  },
}
