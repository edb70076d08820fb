// Responses kept for the Responses API (`store: true`): one row per response,
// per account, holding the response object as it was returned and that turn's
// input items, both as JSON text. `previous_response_id` links a turn to the
// one it continues; there is no foreign key on it, so deleting or expiring a
// response breaks the conversations through it instead of cascading into them.

import type { Kysely, Migration } from 'kysely'
import { idColumn } from './columns.ts'

export const storedResponses: Migration = {
  async up (db: Kysely<any>) {
    await db.schema.createTable('stored_responses')
      // Insertion order: the per-account cap evicts the lowest first.
      .addColumn('seq', ...idColumn(db))
      // resp_… as the client saw it; made by the server, unique across accounts.
      .addColumn('id', 'varchar(128)', col => col.notNull().unique())
      .addColumn('account_id', 'integer', col => col.notNull().references('accounts.id').onDelete('cascade'))
      .addColumn('previous_response_id', 'varchar(128)')
      .addColumn('model', 'varchar(200)', col => col.notNull())
      .addColumn('created_at', 'varchar(32)', col => col.notNull())
      // The UTF-8 size of response + input: a conversation is read only while its total fits.
      .addColumn('bytes', 'integer', col => col.notNull())
      .addColumn('response', 'text', col => col.notNull())
      .addColumn('input', 'text', col => col.notNull())
      .execute()
    // The cap counts one account's rows newest first; the retention job reads the oldest of all.
    await db.schema.createIndex('stored_responses_account_seq').on('stored_responses').columns(['account_id', 'seq']).execute()
    await db.schema.createIndex('stored_responses_created_at').on('stored_responses').column('created_at').execute()
  },

  async down (db: Kysely<any>) {
    await db.schema.dropTable('stored_responses').execute()
  },
}
