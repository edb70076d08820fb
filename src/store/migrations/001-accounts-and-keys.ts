// Accounts and their API keys. Written with Kysely's schema builder only, so the
// same migration runs on SQLite and PostgreSQL.

import { PostgresAdapter, type ColumnDefinitionBuilder, type Kysely, type Migration } from 'kysely'

/** Auto-numbered primary keys are spelled differently per dialect: serial on PostgreSQL, INTEGER PRIMARY KEY AUTOINCREMENT on SQLite. */
function idColumn (db: Kysely<any>): ['serial' | 'integer', (col: ColumnDefinitionBuilder) => ColumnDefinitionBuilder] {
  return db.getExecutor().adapter instanceof PostgresAdapter
    ? ['serial', col => col.primaryKey()]
    : ['integer', col => col.primaryKey().autoIncrement()]
}

export const accountsAndKeys: Migration = {
  async up (db: Kysely<any>) {
    await db.schema.createTable('accounts')
      .addColumn('id', ...idColumn(db))
      .addColumn('email', 'varchar(320)', col => col.notNull().unique())
      .addColumn('tier', 'varchar(64)', col => col.notNull().defaultTo('free'))
      .addColumn('is_admin', 'boolean', col => col.notNull().defaultTo(false))
      .addColumn('password_hash', 'text')
      .addColumn('created_at', 'varchar(32)', col => col.notNull())
      .execute()

    await db.schema.createTable('api_keys')
      .addColumn('id', ...idColumn(db))
      .addColumn('account_id', 'integer', col => col.notNull().references('accounts.id').onDelete('cascade'))
      .addColumn('name', 'varchar(200)')
      .addColumn('prefix', 'varchar(32)', col => col.notNull().unique())
      .addColumn('hash', 'varchar(64)', col => col.notNull())
      .addColumn('created_at', 'varchar(32)', col => col.notNull())
      .addColumn('last_used_at', 'varchar(32)')
      .addColumn('revoked_at', 'varchar(32)')
      .execute()

    await db.schema.createIndex('api_keys_account_id').on('api_keys').column('account_id').execute()
  },

  async down (db: Kysely<any>) {
    await db.schema.dropTable('api_keys').execute()
    await db.schema.dropTable('accounts').execute()
  },
}
