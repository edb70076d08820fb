// Emails are stored NFKC-normalised from now on (accounts.ts), so a
// full-width or otherwise look-alike spelling is the same account. Rows
// written before were only trimmed and lower-cased; each is rewritten to its
// normalised form, unless another row already holds that form: then it stays
// as it was (nothing is merged or dropped), and accounts.ts still finds it by
// its old form. The rule is written out here, not imported, so this migration
// does what it did when it shipped.

import type { Kysely, Migration } from 'kysely'

function normalized (email: string): string {
  return email.normalize('NFKC').trim().toLowerCase().normalize('NFKC')
}

export const normalizedEmails: Migration = {
  async up (db: Kysely<any>) {
    const rows: Array<{ id: number; email: string }> = await db.selectFrom('accounts').select(['id', 'email']).orderBy('id').execute()
    const taken = new Set(rows.map(r => r.email))
    for (const row of rows) {
      const email = normalized(row.email)
      if (email === row.email || taken.has(email)) continue
      await db.updateTable('accounts').set({ email }).where('id', '=', row.id).execute()
      taken.delete(row.email)
      taken.add(email)
    }
  },

  // Normalised emails are valid emails of the same accounts: nothing to undo.
  async down () {},
}
