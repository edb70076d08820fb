// Each account's usage per UTC day, kept beside the usage records as they are
// written (accounts/usage-records.ts, in the same transaction): the dashboard's
// 30 days and the month's billable calls read at most a row a day instead of
// every request's row (a million rows in 30 days took GET /api/v1/usage 0.9 s,
// on the thread that serves every request where the database is SQLite). Filled
// from the records already there, so nothing counted before is lost.

import { sql, type Kysely, type Migration } from 'kysely'

export const usageDaily: Migration = {
  async up (db: Kysely<any>) {
    await db.schema.createTable('usage_daily')
      .addColumn('account_id', 'integer', col => col.notNull().references('accounts.id').onDelete('cascade'))
      // YYYY-MM-DD, the first 10 characters of the records' ISO created_at.
      .addColumn('day', 'varchar(10)', col => col.notNull())
      // Every call, failed ones included (what the chart counts).
      .addColumn('calls', 'bigint', col => col.notNull())
      // Completed and cancelled calls: what the monthly allowance counts.
      .addColumn('billable_calls', 'bigint', col => col.notNull())
      .addColumn('prompt_tokens', 'bigint', col => col.notNull())
      .addColumn('completion_tokens', 'bigint', col => col.notNull())
      .addPrimaryKeyConstraint('usage_daily_pkey', ['account_id', 'day'])
      .execute()
    await sql`
      INSERT INTO usage_daily (account_id, day, calls, billable_calls, prompt_tokens, completion_tokens)
      SELECT account_id, substr(created_at, 1, 10), count(*),
        sum(CASE WHEN status IN ('completed', 'cancelled') THEN 1 ELSE 0 END),
        sum(prompt_tokens), sum(completion_tokens)
      FROM usage_records GROUP BY account_id, substr(created_at, 1, 10)`.execute(db)
  },

  async down (db: Kysely<any>) {
    await db.schema.dropTable('usage_daily').execute()
  },
}
