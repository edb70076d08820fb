// Runs one test body on every database chatd supports: a SQLite file in the
// test's directory, and a throwaway PostgreSQL database (skipped with the
// reason when no server is reachable; see services.ts).

import { join } from 'node:path'
import type { Test } from 'tap'
import type { Config } from '../../src/config.ts'
import { openMigratedDatabase, type Db } from '../../src/store/database.ts'
import { throwawayPostgres } from './services.ts'

export type DatabaseKind = 'sqlite' | 'postgres'

/** Where a test database lives, as DATABASE_URL would say; undefined when skipped. */
export async function testDatabase (t: Test, kind: DatabaseKind): Promise<Config['database'] | undefined> {
  if (kind === 'sqlite') return { kind: 'sqlite', path: join(t.testdir(), 'chatd.db') }
  const url = await throwawayPostgres(t)
  return url === undefined ? undefined : { kind: 'postgres', url }
}

/** A migrated database of each kind, destroyed when its subtest ends. */
export function onEachDatabase (t: Test, title: string, body: (t: Test, db: Db, kind: DatabaseKind) => Promise<void>): void {
  for (const kind of ['sqlite', 'postgres'] as const) {
    t.test(`${title} [${kind}]`, async t => {
      const where = await testDatabase(t, kind)
      if (where === undefined) return
      const db = await openMigratedDatabase(where)
      // tap runs teardowns last-in first-out: the pool closes before the database is dropped.
      t.teardown(() => db.destroy())
      await body(t, db, kind)
    })
  }
}
