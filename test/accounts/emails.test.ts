// Emails are one account however they are spelled: NFKC-normalised and
// compared case-insensitively; zero-width, control and other invisible
// characters are refused, as is an address over 254 characters. Accounts made
// before keep working: migration 004 rewrites their emails to the normalised
// form where that clashes with nothing, and the old form is still found where
// it does (on SQLite and PostgreSQL). Look-alikes are refused: an address that
// mixes scripts within a part, or whose confusable skeleton (UTS #39, accents
// dropped) an existing account holds (kept hashed in a unique column, filled
// in for old accounts by migration 005).

import { join } from 'node:path'
import { Migrator, sql, type Kysely } from 'kysely'
import t from 'tap'
import { Accounts, MAX_EMAIL_LENGTH, normalizeEmail } from '../../src/accounts/accounts.ts'
import { hashPassword } from '../../src/accounts/passwords.ts'
import { run } from '../../src/cli.ts'
import { showInvisible } from '../../src/dashboard/routes/admin.ts'
import { migrateToLatest, openDatabase } from '../../src/store/database.ts'
import { migrations } from '../../src/store/migrations/index.ts'
import { emailSkeletonKey } from '../../src/unicode/email-identity.ts'
import { buildTestApp } from '../helpers/app.ts'
import { onEachDatabase, testDatabase } from '../helpers/databases.ts'
import { Browser } from '../dashboard/jar.ts'
import { loggedIn } from '../security/people.ts'

t.test('the look-alike of an existing admin cannot register; invisible, control and overlong emails are refused', async t => {
  // More registrations than the log-in throttle lets through by default.
  const { app, accounts } = await buildTestApp(t, { env: { LOGIN_ATTEMPTS_PER_MINUTE: '100' } })
  const admin = await accounts.create({ email: 'admin@localhost', isAdmin: true })
  await accounts.setPassword(admin.id, 'admin password')

  const register = async (email: string) => {
    const res = await new Browser(app).post('/api/register', { email, password: 'a fine password', confirm: 'a fine password' }, { csrfFrom: '/api/register' })
    return { status: res.statusCode, body: res.body }
  }
  for (const [label, email] of [
    ['a zero-width space after it', 'admin@localhost\u200b'],
    ['a zero-width joiner inside', 'ad\u200dmin@localhost'],
    ['a byte-order mark inside', 'admin\ufeff@localhost'],
    ['a right-to-left override', 'admin@localhost\u202e'],
    ['a NUL byte', 'admin@localhost\u0000'],
    ['a soft hyphen', 'ad\u00admin@localhost'],
  ]) {
    const res = await register(email)
    t.equal(res.status, 400, `${label}: refused`)
    t.match(res.body, /an email address cannot hold spaces, control characters or invisible characters/, `${label}: saying why`)
  }
  for (const [label, email] of [
    ['upper case', 'ADMIN@LOCALHOST'],
    ['full-width letters', '\uff41\uff44\uff4d\uff49\uff4e@localhost'],
    ['a full-width at sign', 'admin\uff20localhost'],
    ['surrounding spaces', '  admin@localhost  '],
    ['a byte-order mark before it (trimmed, as white space)', '\ufeffadmin@localhost'],
  ]) {
    t.equal((await register(email)).status, 409, `${label}: the same account, which exists`)
  }
  const long = `${'a'.repeat(5000)}@example.com`
  t.equal((await register(long)).status, 400, 'a 5,012-character email is refused')
  t.match((await register(long)).body, `an email address has at most ${MAX_EMAIL_LENGTH} characters`)
  t.equal((await register(`${'a'.repeat(254 - '@example.com'.length)}@example.com`)).status, 303, 'exactly 254 characters is fine')
  const typo = await register('hunter2-in-the-wrong-field')
  t.match(typo.body, /<p class="error" role="alert">not an email address<\/p>/, 'the message does not repeat what was typed')

  const list = await accounts.list()
  t.same(list.map(a => a.email), ['user@example.com', 'admin@localhost', `${'a'.repeat(242)}@example.com`], 'no look-alike account was made')
  // Logging in works whichever spelling the admin types.
  for (const email of ['admin@localhost', 'Admin@LocalHost', '\uff41dmin@localhost']) {
    t.ok(await accounts.verifyLogin(email, 'admin password'), `log-in as ${JSON.stringify(email)}`)
  }
  t.equal(normalizeEmail(' \uff21\uff24MIN@localhost '), 'admin@localhost')
})

t.test('the CLI and the first start refuse such emails too', async t => {
  const { accounts } = await buildTestApp(t)
  await t.rejects(accounts.create({ email: 'root@localhost\u200b' }), { name: 'AccountError', message: /invisible/ })
  await t.rejects(accounts.create({ email: 'root@localhost\n' + 'x' }), { name: 'AccountError' })
  await t.rejects(accounts.create({ email: 'not an email' }), { name: 'AccountError', message: /cannot hold spaces/ })
  await t.rejects(accounts.create({ email: 'nothing-at-all' }), { name: 'AccountError', message: /^not an email address$/ })
})

t.test('the admin page shows invisible characters instead of hiding them', async t => {
  t.equal(showInvisible('admin@localhost\u200b'), 'admin@localhost<U+200B>')
  t.equal(showInvisible('a\u0000b c'), 'a<U+0000>b c')
  t.equal(showInvisible('plain@example.com'), 'plain@example.com')

  // An account stored before the check, holding a zero-width space and a NUL.
  const { app, accounts, db } = await buildTestApp(t)
  const root = await accounts.create({ email: 'root@localhost', isAdmin: true })
  await accounts.setPassword(root.id, 'root password')
  await db.insertInto('accounts').values({ email: 'root@localhost\u200b\u0000', password_hash: null, created_at: new Date().toISOString() }).execute()
  const page = (await (await loggedIn(app, 'root@localhost', 'root password')).get('/api/admin')).body
  t.match(page, 'root@localhost&lt;U+200B&gt;&lt;U+0000&gt;')
  // eslint-disable-next-line no-control-regex -- looking for the NUL byte is the point
  t.notMatch(page, /\u0000|\u200b/, 'nothing invisible written into the page')
})

for (const kind of ['sqlite', 'postgres'] as const) {
  t.test(`migration 004 normalises stored emails without losing an account [${kind}]`, async t => {
    const where = await testDatabase(t, kind)
    if (where === undefined) return
    const db = openDatabase(where)
    t.teardown(() => db.destroy())
    // The database as the last release left it.
    const migrator = new Migrator({ db, provider: { getMigrations: async () => migrations } })
    const { error } = await migrator.migrateTo('003-usage-request-id')
    if (error) throw error
    const legacy = db as Kysely<any>
    const now = new Date().toISOString()
    const hash = await hashPassword('old password')
    // Trimmed and lower-cased, as emails were stored then.
    for (const email of ['\uff42ob@example.com', 'carol@example.com', '\uff43arol@example.com', 'dave\u200b@example.com']) {
      await legacy.insertInto('accounts').values({ email, password_hash: hash, created_at: now }).execute()
    }
    await migrateToLatest(db)

    const rows = await db.selectFrom('accounts').select(['id', 'email']).orderBy('id').execute()
    t.same(rows.map(r => r.email), ['bob@example.com', 'carol@example.com', '\uff43arol@example.com', 'dave\u200b@example.com'],
      'rewritten where the normalised form was free; left as it was where another account holds it; none merged or dropped')
    const accounts = new Accounts(db)
    t.equal((await accounts.verifyLogin('bob@example.com', 'old password'))?.id, rows[0].id, 'the rewritten account logs in by its plain spelling')
    t.equal((await accounts.verifyLogin('\uff42ob@example.com', 'old password'))?.id, rows[0].id, 'and by its old one')
    t.equal((await accounts.verifyLogin('carol@example.com', 'old password'))?.id, rows[1].id, 'carol is carol')
    t.equal((await accounts.verifyLogin('\uff43arol@example.com', 'old password'))?.id, rows[2].id, 'the account left as it was is still found by its old form')
    t.equal((await accounts.verifyLogin('dave\u200b@example.com', 'old password'))?.id, rows[3].id, 'an old email with an invisible character still logs in')
    await t.rejects(accounts.create({ email: 'BOB@example.com' }), /already exists/, 'and nobody can take its place')
  })
}

t.test('look-alikes from other scripts, and with accents, cannot register beside the admin', async t => {
  const { app, accounts } = await buildTestApp(t, { env: { LOGIN_ATTEMPTS_PER_MINUTE: '100' } })
  await accounts.create({ email: 'admin@localhost', isAdmin: true })
  await accounts.create({ email: 'scope@example.com' })
  const register = async (email: string) => {
    const res = await new Browser(app).post('/api/register', { email, password: 'a fine password', confirm: 'a fine password' }, { csrfFrom: '/api/register' })
    return { status: res.statusCode, body: res.body }
  }
  for (const [label, email] of [
    ['a Cyrillic а for the Latin a', '\u0430dmin@localhost'],
    ['a Greek ο in the domain', 'admin@l\u03bfcalhost'],
    ['a Cyrillic letter in a new name', 'p\u0430ypal@example.com'],
  ]) {
    const res = await register(email)
    t.equal(res.status, 400, `${label}: refused`)
    t.match(res.body, /<p class="error" role="alert">an email address cannot mix scripts within its name or a part of its domain/, `${label}: saying why, as a form error`)
  }
  for (const [label, email] of [
    ['a combining acute accent', 'a\u0301dmin@localhost'],
    ['a precomposed á', '\u00e1dmin@localhost'],
    ['rn for m', 'adrnin@localhost'],
    ['a whole Cyrillic name that reads like a Latin one', '\u0455\u0441\u043e\u0440\u0435@example.com'],
    ['a dotless ı', 'admın@localhost'],
  ]) {
    const res = await register(email)
    t.equal(res.status, 400, `${label}: refused`)
    t.match(res.body, 'this email address looks like that of an existing account', `${label}: saying why`)
    t.notMatch(res.body, /it looks like (admin|scope)@/, `${label}: without naming the account it looks like`)
  }
  // Other scripts are welcome on their own: each part in one script.
  for (const email of ['\u0438\u0432\u0430\u043d@\u043f\u0440\u0438\u043c\u0435\u0440.\u0440\u0444', 'ivan@\u043f\u0440\u0438\u043c\u0435\u0440.\u0440\u0444', '\u5c71\u7530\u305f\u308d\u3046@example.jp', 'jos\u00e9@example.com']) {
    t.equal((await register(email)).status, 303, `${email}: registered`)
  }
  t.equal((await register('jose@example.com')).status, 400, 'then jose, without the accent, is a look-alike of josé')
  t.same((await accounts.list()).map(a => a.email).slice(0, 3), ['user@example.com', 'admin@localhost', 'scope@example.com'])
  t.equal((await accounts.list()).length, 7, 'no look-alike account was made')
})

t.test('the CLI refuses look-alikes, naming the account to the operator', async t => {
  const dir = t.testdir()
  process.env.DATABASE_URL = `sqlite://${join(dir, 'chatd.db')}`
  t.teardown(() => { delete process.env.DATABASE_URL })
  const cli = async (args: string[]) => {
    let out = ''
    let err = ''
    const code = await run(args, line => { out += line + '\n' }, line => { err += line + '\n' })
    return { code, out, err }
  }
  t.match(await cli(['accounts', 'create', '--email', 'admin@localhost', '--admin']), { code: 0 })
  t.match(await cli(['accounts', 'create', '--email', '\u0430dmin@localhost']), { code: 1, err: /cannot mix scripts/ })
  t.match(await cli(['accounts', 'create', '--email', 'a\u0301dmin@localhost']), { code: 1, err: /looks like that of an existing account .*: it looks like admin@localhost/ })
  t.match(await cli(['accounts', 'list']), { out: /^EMAIL\tTIER\tROLE\tCREATED\nadmin@localhost\t[^\n]*\n$/ })
})

onEachDatabase(t, 'the skeleton is stored, unique and indexed; two look-alikes made at once: one account', async (t, db, kind) => {
  const accounts = new Accounts(db)
  const made = await accounts.create({ email: 'bob@example.com' })
  const row = await db.selectFrom('accounts').select(['email_skeleton']).where('id', '=', made.id).executeTakeFirstOrThrow()
  t.equal(row.email_skeleton, emailSkeletonKey('bob@example.com'), 'the skeleton is stored with the account')
  t.equal(emailSkeletonKey('b\u00f6b@example.com'), row.email_skeleton, 'bob and böb share it')
  await t.rejects(accounts.create({ email: 'b\u00f6b@example.com' }), { name: 'AccountError', message: /looks like that of an existing account/ })

  const index = kind === 'sqlite'
    ? await sql<{ sql: string }>`select sql from sqlite_master where type = 'index' and name = 'accounts_email_skeleton'`.execute(db)
    : await sql<{ sql: string }>`select indexdef as sql from pg_indexes where indexname = 'accounts_email_skeleton'`.execute(db)
  t.match(index.rows[0]?.sql, /UNIQUE INDEX.*email_skeleton/i, 'a unique index: the check is one indexed lookup')

  // Both pass the lookup before either is written; the unique index lets one in.
  const results = await Promise.allSettled([accounts.create({ email: 'carol@example.com' }), accounts.create({ email: 'c\u00e0rol@example.com' })])
  t.equal(results.filter(r => r.status === 'fulfilled').length, 1, 'one account made')
  const refused = results.find(r => r.status === 'rejected') as PromiseRejectedResult
  t.match(refused.reason, { name: 'AccountError', message: /looks like that of an existing account/ }, 'the other refused with the same message')
})

for (const kind of ['sqlite', 'postgres'] as const) {
  t.test(`migration 005 fills in the skeletons of existing accounts, oldest first [${kind}]`, async t => {
    const where = await testDatabase(t, kind)
    if (where === undefined) return
    const db = openDatabase(where)
    t.teardown(() => db.destroy())
    const migrator = new Migrator({ db, provider: { getMigrations: async () => migrations } })
    const { error } = await migrator.migrateTo('004-normalized-emails')
    if (error) throw error
    const legacy = db as Kysely<any>
    const now = new Date().toISOString()
    const hash = await hashPassword('old password')
    // The admin, a look-alike registered before the check existed, and someone else.
    for (const email of ['admin@localhost', '\u0430dmin@localhost', 'dave@example.com']) {
      await legacy.insertInto('accounts').values({ email, password_hash: hash, created_at: now }).execute()
    }
    await migrateToLatest(db)

    const rows = await db.selectFrom('accounts').select(['email', 'email_skeleton']).orderBy('id').execute()
    t.same(rows, [
      { email: 'admin@localhost', email_skeleton: emailSkeletonKey('admin@localhost') },
      { email: '\u0430dmin@localhost', email_skeleton: null },
      { email: 'dave@example.com', email_skeleton: emailSkeletonKey('dave@example.com') },
    ], 'the oldest holds its skeleton; the later look-alike keeps none; nothing merged or dropped')
    const accounts = new Accounts(db)
    t.ok(await accounts.verifyLogin('\u0430dmin@localhost', 'old password'), 'the old look-alike still logs in')
    await t.rejects(accounts.create({ email: 'a\u0301dmin@localhost' }), /looks like that of an existing account/, 'and no new look-alike of the admin can be made')
    await t.rejects(accounts.create({ email: 'dav\u00e9@example.com' }), /looks like that of an existing account/)
  })
}
