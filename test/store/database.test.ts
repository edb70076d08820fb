// The SQLite store: migrations on a real file, WAL mode, idempotent re-runs,
// and data that survives closing and reopening. What must hold on both
// databases is in dialects.test.ts.

import { existsSync } from 'node:fs'
import { join } from 'node:path'
import { DatabaseSync } from 'node:sqlite'
import t from 'tap'
import { sql } from 'kysely'
import { openMigratedDatabase } from '../../src/store/database.ts'

t.test('migrates a new file, in WAL mode, creating parent directories', async t => {
  const path = join(t.testdir(), 'nested', 'dir', 'chatd.db')
  const db = await openMigratedDatabase({ kind: 'sqlite', path })
  t.ok(existsSync(path))
  const { rows } = await sql<{ journal_mode: string }>`PRAGMA journal_mode`.execute(db)
  t.equal(rows[0].journal_mode, 'wal')
  const tables = (await db.introspection.getTables()).map(table => table.name).sort()
  t.same(tables, ['accounts', 'api_keys', 'sessions', 'settings', 'stored_responses', 'usage_daily', 'usage_records'])
  const keyColumns = (await db.introspection.getTables()).find(x => x.name === 'api_keys')!.columns.map(c => c.name)
  t.same(keyColumns, ['id', 'account_id', 'name', 'prefix', 'hash', 'created_at', 'last_used_at', 'revoked_at'])
  const accountColumns = (await db.introspection.getTables()).find(x => x.name === 'accounts')!.columns.map(c => c.name)
  t.same(accountColumns, ['id', 'email', 'tier', 'is_admin', 'password_hash', 'created_at', 'email_skeleton'])
  await db.destroy()
})

t.test('rows survive reopening; migrating again is a no-op', async t => {
  const path = join(t.testdir(), 'chatd.db')
  const first = await openMigratedDatabase({ kind: 'sqlite', path })
  await first.insertInto('accounts').values({ email: 'a@b.c', password_hash: null, created_at: new Date().toISOString() }).execute()
  await first.destroy()

  const second = await openMigratedDatabase({ kind: 'sqlite', path })
  const row = await second.selectFrom('accounts').selectAll().executeTakeFirstOrThrow()
  t.equal(row.email, 'a@b.c')
  t.equal(row.tier, 'free', 'tier defaults to free')
  t.equal(Boolean(row.is_admin), false)
  t.equal(row.password_hash, null)
  await second.destroy()

  const raw = new DatabaseSync(path)
  const applied = raw.prepare('SELECT name FROM kysely_migration ORDER BY name').all().map(r => r.name)
  raw.close()
  t.same(applied, ['001-accounts-and-keys', '002-sessions-usage-settings', '003-usage-request-id', '004-normalized-emails', '005-email-skeletons', '006-stored-responses', '007-usage-daily'])
})

t.test('booleans, nulls, unique constraints and transactions through the node:sqlite adapter', async t => {
  const db = await openMigratedDatabase({ kind: 'sqlite', path: join(t.testdir(), 'chatd.db') })
  t.teardown(() => db.destroy())
  const now = new Date().toISOString()
  await db.insertInto('accounts').values({ email: 'admin@x', is_admin: true, password_hash: null, created_at: now }).execute()
  const admin = await db.selectFrom('accounts').select(['is_admin']).where('email', '=', 'admin@x').executeTakeFirstOrThrow()
  t.equal(Boolean(admin.is_admin), true)
  await t.rejects(db.insertInto('accounts').values({ email: 'admin@x', password_hash: null, created_at: now }).execute(), /UNIQUE/)

  await t.rejects(db.transaction().execute(async trx => {
    await trx.insertInto('accounts').values({ email: 'rolled@back', password_hash: null, created_at: now }).execute()
    throw new Error('abort')
  }), /abort/)
  t.equal(await db.selectFrom('accounts').select('id').where('email', '=', 'rolled@back').executeTakeFirst(), undefined)

  const streamed = []
  for await (const row of db.selectFrom('accounts').select('email').stream()) streamed.push(row.email)
  t.same(streamed, ['admin@x'])
})
