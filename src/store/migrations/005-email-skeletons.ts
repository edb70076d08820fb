// Each account's email gets its confusable skeleton (UTS #39; see
// src/unicode/email-identity.ts), hashed, in a unique column, so a new
// address that looks like an existing account's is found by one indexed
// lookup instead of a scan. Existing accounts are filled in oldest first; an
// account whose skeleton an older one already holds keeps NULL (nothing is
// merged or dropped, it still logs in; it only cannot be taken as a model for
// a newer look-alike, since the older one already is). The skeleton depends on
// the confusables table's version: a newer table ships with a migration that
// recomputes this column.

import type { Kysely, Migration } from 'kysely'
import { emailSkeletonKey } from '../../unicode/email-identity.ts'

export const emailSkeletons: Migration = {
  async up (db: Kysely<any>) {
    await db.schema.alterTable('accounts').addColumn('email_skeleton', 'varchar(64)').execute()
    const rows: Array<{ id: number; email: string }> = await db.selectFrom('accounts').select(['id', 'email']).orderBy('id').execute()
    const taken = new Set<string>()
    for (const row of rows) {
      const key = emailSkeletonKey(row.email)
      if (taken.has(key)) continue
      taken.add(key)
      await db.updateTable('accounts').set({ email_skeleton: key }).where('id', '=', row.id).execute()
    }
    await db.schema.createIndex('accounts_email_skeleton').on('accounts').column('email_skeleton').unique().execute()
  },

  async down (db: Kysely<any>) {
    await db.schema.dropIndex('accounts_email_skeleton').execute()
    await db.schema.alterTable('accounts').dropColumn('email_skeleton').execute()
  },
}
