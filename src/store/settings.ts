// Values every replica must agree on, kept in the database they share. The
// first replica to need one creates it; the others read the same row.

import type { Db } from './database.ts'

/** Returns the stored value of `name`, creating it with `make()` if there is none yet. */
export async function sharedSetting (db: Db, name: string, make: () => string): Promise<string> {
  // Insert-if-absent, then read back: two replicas racing both end up with the winner's value.
  await db.insertInto('settings').values({ name, value: make() })
    .onConflict(oc => oc.column('name').doNothing())
    .execute()
  const row = await db.selectFrom('settings').select('value').where('name', '=', name).executeTakeFirstOrThrow()
  return row.value
}
