// A database that cannot be opened at start: `chatd serve` (and a CLI command)
// say so in one line naming DATABASE_URL and where it points, never its
// password, and exit 1; no stack trace. Real processes, a closed port.

import { spawn } from 'node:child_process'
import { once } from 'node:events'
import { join } from 'node:path'
import t from 'tap'
import { freePort } from '../helpers/chatd-process.ts'
import { REFUSED_URL } from '../helpers/refused.ts'
import { REPO_ROOT } from '../helpers/models.ts'

async function runChatd (args: string[], env: Record<string, string>, cwd: string): Promise<{ code: number | null, stdout: string, stderr: string }> {
  const child = spawn(process.execPath, [join(REPO_ROOT, 'src/cli.ts'), ...args], {
    cwd,
    env: { PATH: process.env.PATH, HOME: cwd, HOST: '127.0.0.1', PORT: String(await freePort()), CHATD_AUTO_PULL: '0', LOG_LEVEL: 'warn', MODELS_FILE: join(REPO_ROOT, 'models/models.json'), TIERS_FILE: join(REPO_ROOT, 'tiers.json'), ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  })
  let stdout = ''
  let stderr = ''
  child.stdout.on('data', chunk => { stdout += chunk })
  child.stderr.on('data', chunk => { stderr += chunk })
  const [code] = await once(child, 'exit') as [number | null]
  return { code, stdout, stderr }
}

t.test('chatd serve with PostgreSQL on a closed port: one line naming DATABASE_URL, exit 1', async t => {
  const port = new URL(REFUSED_URL).port // never a port another test may listen on meanwhile
  const res = await runChatd(['serve'], { DATABASE_URL: `postgres://chatd:s3cret-pw@127.0.0.1:${port}/chatd` }, t.testdir())
  t.equal(res.code, 1)
  t.equal(res.stderr, `chatd: DATABASE_URL: cannot open the database (PostgreSQL at 127.0.0.1:${port}): connect ECONNREFUSED 127.0.0.1:${port}\n`)
  t.notMatch(res.stderr + res.stdout, /s3cret-pw/, 'the password is never printed')
  t.notMatch(res.stderr, /\n\s+at /, 'no stack trace')
  t.notMatch(res.stdout, /sk-chatd-/, 'no admin key: the start did not succeed')
})

t.test('chatd serve with a SQLite path that cannot be made: the same line', async t => {
  const dir = t.testdir({ 'a-file': 'not a folder' })
  const res = await runChatd(['serve'], { DATABASE_URL: `sqlite://${join(dir, 'a-file', 'chatd.db')}` }, dir)
  t.equal(res.code, 1)
  t.match(res.stderr, new RegExp(`^chatd: DATABASE_URL: cannot open the database \\(the SQLite file ${join(dir, 'a-file', 'chatd.db')}\\): (EEXIST|ENOTDIR)[^\\n]*\\n$`))
})

t.test('a CLI command on an unreachable database: the same line, under its own name', async t => {
  const port = new URL(REFUSED_URL).port
  const res = await runChatd(['accounts', 'list'], { DATABASE_URL: `postgres://chatd:s3cret-pw@127.0.0.1:${port}/chatd` }, t.testdir())
  t.equal(res.code, 1)
  t.equal(res.stderr, `chatd accounts list: DATABASE_URL: cannot open the database (PostgreSQL at 127.0.0.1:${port}): connect ECONNREFUSED 127.0.0.1:${port}\n`)
})
