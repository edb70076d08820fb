// The account commands an operator runs: set-tier (checked against
// TIERS_FILE), set-password (from stdin, then a dashboard log-in works),
// list, and create with a tier.

import { spawn } from 'node:child_process'
import { join } from 'node:path'
import t from 'tap'
import { Accounts } from '../../src/accounts/accounts.ts'
import { openMigratedDatabase } from '../../src/store/database.ts'
import { cli, withEnv } from '../helpers/cli.ts'
import { REPO_ROOT } from '../helpers/models.ts'

/** Runs the real `chatd` launcher with `input` on stdin. */
async function chatd (args: string[], env: Record<string, string>, input: string): Promise<{ code: number | null; out: string }> {
  const child = spawn(process.execPath, ['bin/chatd.js', ...args], { cwd: REPO_ROOT, env: { ...process.env, ...env }, stdio: ['pipe', 'pipe', 'pipe'] })
  let out = ''
  child.stdout.on('data', chunk => { out += chunk })
  child.stderr.on('data', chunk => { out += chunk })
  child.stdin.end(input)
  const code = await new Promise<number | null>(resolve => child.once('exit', resolve))
  return { code, out }
}

t.test('set-tier, list, create --tier: tiers must exist in TIERS_FILE', async t => {
  const dir = t.testdir({ 'tiers.json': JSON.stringify({ tiers: { free: {}, gold: { requests_per_minute: 500 } } }) })
  const database = join(dir, 'chatd.db')
  withEnv(t, { DATABASE_URL: `sqlite://${database}`, TIERS_FILE: join(dir, 'tiers.json') })

  t.match(await cli(['accounts', 'create', '--email', 'a@example.com']), { code: 0, out: /tier free/ })
  t.match(await cli(['accounts', 'create', '--email', 'b@example.com', '--tier', 'platinum']), { code: 1, err: /no tier named platinum .* \(it has: free, gold\)/ })
  t.match(await cli(['accounts', 'set-tier', '--email', 'A@example.com', '--tier', 'gold']), { code: 0, out: 'a@example.com: tier free -> gold\n' })
  t.match(await cli(['accounts', 'set-tier', '--email', 'a@example.com', '--tier', 'nope']), { code: 1, err: /no tier named nope/ })
  t.match(await cli(['accounts', 'set-tier', '--email', 'nobody@example.com', '--tier', 'gold']), { code: 1, err: /no account with email nobody@example.com/ })
  t.match(await cli(['accounts', 'set-tier', '--email', 'a@example.com']), { code: 2, err: /--tier is required/ })
  const listed = await cli(['accounts', 'list'])
  t.equal(listed.code, 0)
  t.match(listed.out, /^EMAIL\tTIER\tROLE\tCREATED\na@example\.com\tgold\tuser\t\d{4}-/)

  process.env.TIERS_FILE = join(dir, 'missing.json')
  t.match(await cli(['accounts', 'set-tier', '--email', 'a@example.com', '--tier', 'gold']), { code: 1, err: /TIERS_FILE .*missing\.json: cannot be read/ })
})

t.test('accounts delete: nothing without --yes; with it the account, its keys and its usage go', async t => {
  const dir = t.testdir()
  const database = join(dir, 'chatd.db')
  withEnv(t, { DATABASE_URL: `sqlite://${database}` })
  await cli(['accounts', 'create', '--email', 'a@example.com'])
  await cli(['accounts', 'create', '--email', 'root@example.com', '--admin'])
  const key = (await cli(['keys', 'create', '--email', 'a@example.com'])).out.trim()

  t.match(await cli(['accounts', 'delete', '--email', 'a@example.com']), { code: 1, err: /would delete a@example\.com with its API keys.*nothing was deleted.*--yes/ })
  t.match(await cli(['accounts', 'delete']), { code: 2, err: /--email is required/ })
  t.match(await cli(['accounts', 'delete', '--email', 'nobody@example.com', '--yes']), { code: 1, err: /no account with email nobody@example\.com/ })
  t.match((await cli(['accounts', 'list'])).out, /a@example\.com/, 'still there')

  t.match(await cli(['accounts', 'delete', '--email', 'A@example.com', '--yes']), { code: 0, out: 'deleted a@example.com, with its keys, sessions, usage records and stored responses\n' })
  t.notMatch((await cli(['accounts', 'list'])).out, /a@example\.com/)
  const db = await openMigratedDatabase({ kind: 'sqlite', path: database })
  t.teardown(() => db.destroy())
  t.match(await new Accounts(db).authenticate(key), { ok: false }, 'its key no longer authenticates')
  t.match(await cli(['accounts', 'delete', '--email', 'root@example.com', '--yes']), { code: 0, out: /an admin; chatd accounts create --email E --admin makes another/ })
})

t.test('set-password reads stdin; the account can then log in', async t => {
  const dir = t.testdir()
  const database = join(dir, 'chatd.db')
  const env = { DATABASE_URL: `sqlite://${database}` }
  const db = await openMigratedDatabase({ kind: 'sqlite', path: database })
  t.teardown(() => db.destroy())
  const accounts = new Accounts(db)
  await accounts.create({ email: 'ops@example.com', isAdmin: true })

  const ok = await chatd(['accounts', 'set-password', '--email', 'ops@example.com'], env, 'a long passphrase\n')
  t.equal(ok.code, 0, ok.out)
  t.match(ok.out, /password set for ops@example.com/)
  t.notMatch(ok.out, /a long passphrase/, 'the password is not echoed')
  t.ok(await accounts.verifyLogin('ops@example.com', 'a long passphrase'))
  const short = await chatd(['accounts', 'set-password', '--email', 'ops@example.com'], env, 'short\n')
  t.equal(short.code, 1)
  t.match(short.out, /at least 8 characters/)
})
