// The CLI against a real SQLite file: accounts and keys commands, their output
// (keys create prints only the key), errors, and the bin launcher itself.

import { execFile } from 'node:child_process'
import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import { promisify } from 'node:util'
import t from 'tap'
import { Accounts } from '../../src/accounts/accounts.ts'
import { ensureAdminAccount } from '../../src/accounts/bootstrap.ts'
import { openMigratedDatabase } from '../../src/store/database.ts'
import { cli, withEnv } from '../helpers/cli.ts'
import { STORIES_SOURCE } from '../helpers/models.ts'

const ROOT = new URL('../..', import.meta.url).pathname

t.test('accounts and keys commands', async t => {
  const dbPath = join(t.testdir(), 'chatd.db')
  withEnv(t, { DATABASE_URL: `sqlite://${dbPath}` })

  t.match(await cli(['accounts', 'create', '--email', 'dev@example.com']), { code: 0, out: 'created account dev@example.com (tier free)\n' })
  t.match(await cli(['accounts', 'create', '--email', 'boss@example.com', '--tier', 'pro', '--admin']), { code: 0, out: /tier pro, admin/ })
  t.match(await cli(['accounts', 'create', '--email', 'dev@example.com']), { code: 1, err: /already exists/ })

  const created = await cli(['keys', 'create', '--email', 'dev@example.com', '--name', 'ci'])
  t.equal(created.code, 0)
  t.match(created.out, /^sk-chatd-[A-Za-z0-9]{32}\n$/, 'prints only the key')
  const key = created.out.trim()
  const second = (await cli(['keys', 'create', '--email', 'dev@example.com'])).out.trim()

  const listed = await cli(['keys', 'list', '--email', 'dev@example.com'])
  t.equal(listed.code, 0)
  const lines = listed.out.trim().split('\n')
  t.match(lines[0], /^PREFIX\tNAME\tCREATED\tLAST USED\tSTATUS$/)
  t.match(lines[1], new RegExp(`^${key.slice(0, 15)}\tci\t\\d{4}-.*\tnever\tactive$`))
  t.match(lines[2], new RegExp(`^${second.slice(0, 15)}\t-\t`))
  t.notMatch(listed.out, key.slice(15), 'the list never shows a key')

  t.match(await cli(['keys', 'revoke', key.slice(0, 15)]), { code: 0, out: `revoked ${key.slice(0, 15)} (account dev@example.com)\n` })
  t.match(await cli(['keys', 'revoke', key.slice(0, 15)]), { code: 0, out: new RegExp(`^${key.slice(0, 15)} \\(account dev@example\\.com\\) was already revoked \\(\\d{4}-.*\\); it authenticates nothing\n$`) }, 'revoking twice says the key is revoked, not that there is none')
  t.match(await cli(['keys', 'revoke', 'sk-chatd-nope00']), { code: 1, err: /no key with prefix sk-chatd-nope00; nothing revoked/ })
  t.match((await cli(['keys', 'list', '--email', 'dev@example.com'])).out, /\trevoked \d{4}-/)

  const db = await openMigratedDatabase({ kind: 'sqlite', path: dbPath })
  const accounts = new Accounts(db)
  t.same(await accounts.authenticate(key), { ok: false, reason: 'revoked' })
  t.match(await accounts.authenticate(second), { ok: true, account: { email: 'dev@example.com' } })
  await db.destroy()

  t.match(await cli(['keys', 'list', '--email', 'nobody@example.com']), { code: 1, err: /no account with email/ })
  t.match(await cli(['keys', 'create', '--email', 'nobody@example.com']), { code: 1, err: /no account with email/ })
})

t.test('keys revoke takes the whole key an operator pastes, and names the key it revoked', async t => {
  const dbPath = join(t.testdir(), 'chatd.db')
  withEnv(t, { DATABASE_URL: `sqlite://${dbPath}` })
  await cli(['accounts', 'create', '--email', 'dev@example.com'])
  await cli(['accounts', 'create', '--email', 'ops@example.com'])
  const leaked = (await cli(['keys', 'create', '--email', 'dev@example.com'])).out.trim()
  const other = (await cli(['keys', 'create', '--email', 'ops@example.com'])).out.trim()

  // A key of the right shape and the leaked key's prefix, but not the key: nothing is revoked.
  const lookalike = leaked.slice(0, 15) + [...leaked.slice(15)].map(c => c === 'a' ? 'b' : 'a').join('')
  const wrong = await cli(['keys', 'revoke', lookalike])
  t.match(wrong, { code: 1, err: `no key matches the key given (prefix ${leaked.slice(0, 15)}); nothing revoked` })
  t.notMatch(wrong.err, lookalike.slice(15), 'the message does not repeat the key')

  const revoked = await cli(['keys', 'revoke', leaked])
  t.match(revoked, { code: 0, out: `revoked ${leaked.slice(0, 15)} (account dev@example.com)\n` }, 'the whole key is revoked, named by its prefix')
  t.notMatch(revoked.out, leaked.slice(15), 'the answer does not repeat the key')
  t.match(await cli(['keys', 'revoke', ` ${leaked}\n`]), { code: 0, out: /was already revoked/ }, 'pasted with white space around it, and a second time')
  t.match(await cli(['keys', 'revoke', leaked + 'x']), { code: 1, err: /neither a whole key .* nor a prefix/ })

  const db = await openMigratedDatabase({ kind: 'sqlite', path: dbPath })
  t.teardown(() => db.destroy())
  const accounts = new Accounts(db)
  t.same(await accounts.authenticate(leaked), { ok: false, reason: 'revoked' }, 'the leaked key authenticates nothing')
  t.match(await accounts.authenticate(other), { ok: true }, 'another account\'s key is untouched')
})

t.test('the key commands README\'s quick start shows work, in order, after a first start', async t => {
  const readme = readFileSync(join(ROOT, 'README.md'), 'utf8')
  const section = readme.slice(readme.indexOf('### Your first authenticated call'), readme.indexOf('\n## ', readme.indexOf('### Your first authenticated call')))
  // set-password reads standard input: test/dashboard/pages.test.ts runs it, then logs in.
  const commands = [...section.matchAll(/npx chatd ((?:keys|accounts) [^`)\n]+)/g)].map(m => m[1].trim().split(/\s+/)).filter(args => args[1] !== 'set-password')
  t.ok(commands.some(args => args[0] === 'keys' && args[1] === 'create'), 'the section shows how to make keys')
  const dbPath = join(t.testdir(), 'chatd.db')
  withEnv(t, { DATABASE_URL: `sqlite://${dbPath}` })
  // What the first start does on an empty database (default CHATD_ADMIN_EMAIL).
  const db = await openMigratedDatabase({ kind: 'sqlite', path: dbPath })
  await ensureAdminAccount(new Accounts(db), { email: 'admin@localhost' })
  await db.destroy()
  for (const args of commands) {
    const result = await cli(args)
    t.equal(result.code, 0, `npx chatd ${args.join(' ')}: ${result.err}`)
    if (args[0] === 'keys' && args[1] === 'create') t.match(result.out, /^sk-chatd-[A-Za-z0-9]{32}\n$/)
  }
})

t.test('usage errors', async t => {
  t.match(await cli([]), { code: 2, out: '', err: /no command given[\s\S]*Usage: chatd <command>/ }, 'no command is a usage error: exit 2, as docs/accounts-and-limits.md says')
  t.match(await cli(['--help']), { code: 0, out: /keys revoke <key or prefix>/ })
  t.match(await cli(['frobnicate']), { code: 2, err: /unknown command: frobnicate/ })
  t.match(await cli(['keys', 'create']), { code: 2, err: /--email is required/ })
  t.match(await cli(['keys', 'create', '--email']), { code: 2, err: /--email/ })
  t.match(await cli(['keys', 'create', '--email', 'a@b.c', '--bogus']), { code: 2, err: /Unknown option '--bogus'/ })
  t.match(await cli(['keys', 'revoke']), { code: 2, err: /<key or prefix> is required/ })
  t.match(await cli(['keys', 'revoke', 'a', 'b']), { code: 2, err: /unexpected argument: b/ })
})

t.test('every command prints its help for --help and exits 0', async t => {
  const commands = ['serve', 'accounts create', 'accounts set-tier', 'accounts set-password', 'accounts list', 'keys create', 'keys list', 'keys revoke', 'pull', 'convert', 'install-cuda']
  for (const command of commands) {
    for (const flag of ['--help', '-h']) {
      const result = await cli([...command.split(' '), flag])
      t.equal(result.code, 0, `chatd ${command} ${flag}: exit 0 (${result.err})`)
      t.equal(result.err, '', `chatd ${command} ${flag}: nothing on stderr`)
      t.match(result.out, command === 'convert' ? /chatd convert --from <hf-checkpoint-dir>[\s\S]*--block-size/ : new RegExp(`Usage: chatd ${command}\n\n {2}${command}`), `chatd ${command} ${flag}: its help`)
    }
  }
  // After other flags too, and for a group.
  t.match(await cli(['convert', '--out', 'x', '--help']), { code: 0, out: /Usage:/ })
  t.match(await cli(['keys', '--help']), { code: 0, out: /keys create[\s\S]*keys list[\s\S]*keys revoke/ })
  t.match(await cli(['keys']), { code: 2, err: /which keys command/ })
  // Every dtype convert writes is named, int8 included, in its own help and in chatd's.
  t.match((await cli(['convert', '--help'])).out, /--dtype fp32\|fp16\|int4\|int8/)
  t.match((await cli(['--help'])).out, /convert --random CONFIG[^\n]*\(D: fp32, fp16, int4, int8\)/)
})

t.test('convert is wired to the model builder', async t => {
  const out = join(t.testdir(), 'stories')
  const from = STORIES_SOURCE
  const built = await cli(['convert', '--from', from, '--out', out, '--dtype', 'fp32'])
  t.match(built, { code: 0, out: /wrote .*model\.onnx/ })
  t.match(await cli(['convert', '--out', out]), { code: 2, err: /exactly one of --from/ })
  t.match(await cli(['convert', '--from', '/nonexistent', '--out', join(out, 'x')]), { code: 1, err: /^chatd convert: / })
})

t.test('pull says where a local model\'s files go', async t => {
  const dir = t.testdir({ 'models.json': JSON.stringify({ models: [{ id: 'm', backend: 'onnx', path: 'weights/m', dtype: 'fp16' }, { id: 'u', backend: 'openai', baseUrl: 'http://x', upstreamModel: 'y' }] }) })
  withEnv(t, { MODELS_FILE: join(dir, 'models.json') })
  t.match(await cli(['pull', 'm']), { code: 1, err: new RegExp(`onnx/model_fp16\\.onnx\\) at ${join(dir, 'weights', 'm')}`) })
  t.match(await cli(['pull', 'u']), { code: 1, err: /nothing to download/ })
  t.match(await cli(['pull', 'zz']), { code: 1, err: /no model with id zz/ })
})

t.test('bad configuration is reported by name', async t => {
  withEnv(t, { DATABASE_URL: 'mysql://nope' })
  t.match(await cli(['keys', 'list', '--email', 'a@b.c']), { code: 1, err: /DATABASE_URL/ })
})

t.test('the bin launcher runs the CLI', async t => {
  const dbPath = join(t.testdir(), 'chatd.db')
  const env = { ...process.env, DATABASE_URL: `sqlite://${dbPath}` }
  const exec = promisify(execFile)
  await exec(process.execPath, ['bin/chatd.js', 'accounts', 'create', '--email', 'x@example.com'], { cwd: ROOT, env })
  const { stdout, stderr } = await exec(process.execPath, ['bin/chatd.js', 'keys', 'create', '--email', 'x@example.com'], { cwd: ROOT, env })
  t.match(stdout, /^sk-chatd-[A-Za-z0-9]{32}\n$/)
  t.equal(stderr, '', 'nothing on stderr (no warnings)')
  await t.rejects(exec(process.execPath, ['bin/chatd.js', 'nope'], { cwd: ROOT, env }), { code: 2 })
})
