// Usage rows name their request: the chat completion's id (chatcmpl-…), the
// one the client saw. Unique, so writing a row again after a lost
// acknowledgement (the database went away between committing the insert and
// answering it) cannot count a request twice, and so a row can be matched to
// the response it bills. Null for rows written before this migration.

import type { Kysely, Migration } from 'kysely'

export const usageRequestId: Migration = {
  async up (db: Kysely<any>) {
    await db.schema.alterTable('usage_records').addColumn('request_id', 'varchar(64)').execute()
    // Both databases let a unique index hold any number of nulls.
    await db.schema.createIndex('usage_records_request_id').unique().on('usage_records').column('request_id').execute()
  },

  async down (db: Kysely<any>) {
    await db.schema.dropIndex('usage_records_request_id').execute()
    await db.schema.alterTable('usage_records').dropColumn('request_id').execute()
  },
}
