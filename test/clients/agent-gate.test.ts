// The gate of the tests that drive an agent's own binary (agentCommand, test/helpers/agents.ts), on
// an agents folder of the test's own (CHATD_AGENTS_DIR): with the agent missing, a test skips saying
// how to install it, or fails under CHATD_REQUIRE_SERVICES=1 (CI); with it there, the test gets the
// command that runs it. Each case is a test file run in a child process, so the failure it must
// produce is the child's, not this file's. And no test file checks for an agent by itself.

import { readdirSync, readFileSync } from 'node:fs'
import { join, relative } from 'node:path'
import t from 'tap'
import { CODEX } from '../../scripts/agents.ts'
import { REPO_ROOT } from '../helpers/models.ts'
import { runModuleSource, type ScriptRun } from '../helpers/node-script.ts'

const FILE = `
import t from 'tap'
import { CODEX } from ${JSON.stringify(join(REPO_ROOT, 'scripts/agents.ts'))}
import { agentCommand } from ${JSON.stringify(join(REPO_ROOT, 'test/helpers/agents.ts'))}
t.test('drives codex', async t => {
  const codex = agentCommand(t, CODEX)
  if (!codex) return
  t.pass('runs ' + JSON.stringify(codex))
})
`

async function runGated (agentsDir: string, required: boolean): Promise<ScriptRun> {
  // The child is a test file run by itself, not one of this run's: none of tap's variables.
  const env = Object.fromEntries(Object.entries(process.env).filter(([name]) => !/^(TAP|_TAPJS|NODE_V8_COVERAGE|CHATD_REQUIRE_SERVICES$)/.test(name)))
  return runModuleSource(FILE, { cwd: REPO_ROOT, env: { ...env, CHATD_AGENTS_DIR: agentsDir, ...(required ? { CHATD_REQUIRE_SERVICES: '1' } : {}) }, killAfterMs: 60_000 })
}

t.test('missing, outside CI: the test skips, saying how to install the agent', async t => {
  const dir = t.testdir()
  const { code, stdout } = await runGated(dir, false)
  t.match(stdout, `ok 1 - drives codex needs ${CODEX.package} # SKIP ${CODEX.package}@${CODEX.version} is not installed in ${join(dir, `codex-${CODEX.version}`)}; run npm run test:agents-install`)
  t.notMatch(stdout, /not ok/)
  t.equal(code, 0)
})

t.test('missing, under CHATD_REQUIRE_SERVICES=1: the test fails, saying so', async t => {
  const dir = t.testdir()
  const { code, stdout } = await runGated(dir, true)
  t.match(stdout, `not ok 1 - drives codex: ${CODEX.package}@${CODEX.version} is not installed in ${join(dir, `codex-${CODEX.version}`)}; run npm run test:agents-install (CHATD_AGENTS_DIR picks the folder), and CHATD_REQUIRE_SERVICES=1 says it must be there`)
  t.notMatch(stdout, /# SKIP/)
  t.equal(code, 1)
})

t.test('installed: the test gets the command that runs it, skipping nothing, in CI or not', async t => {
  // What the install leaves, as far as the gate looks: the pinned version's package.json and its entry.
  const dir = t.testdir({ [`codex-${CODEX.version}`]: { node_modules: { '@openai': { codex: { 'package.json': JSON.stringify({ version: CODEX.version }), bin: { 'codex.js': '' } } } } } })
  const entry = join(dir, `codex-${CODEX.version}`, 'node_modules', '@openai', 'codex', 'bin', 'codex.js')
  for (const required of [false, true]) {
    const { code, stdout } = await runGated(dir, required)
    t.match(stdout, `ok 1 - runs ${JSON.stringify([process.execPath, entry])}`, `CHATD_REQUIRE_SERVICES ${required ? '=1' : 'unset'}`)
    t.notMatch(stdout, /not ok|# SKIP/)
    t.equal(code, 0)
  }
})

t.test('every test that needs an agent goes through agentCommand', async t => {
  const files = readdirSync(join(REPO_ROOT, 'test'), { recursive: true, encoding: 'utf8' }).filter(file => file.endsWith('.ts')).map(file => join(REPO_ROOT, 'test', file))
  const own = files.filter(file => file !== join(REPO_ROOT, 'test/helpers/agents.ts') && /\binstalledAgent\b/.test(readFileSync(file, 'utf8')))
  t.same(own.map(file => relative(REPO_ROOT, file)), [], 'files that check for an agent themselves')
  const users = files.filter(file => /\bagentCommand\(/.test(readFileSync(file, 'utf8'))).map(file => relative(REPO_ROOT, file))
  for (const file of ['test/clients/codex.test.ts', 'test/clients/claude-code.test.ts', 'test/clients/out-of-service.test.ts', 'test/dashboard/key-setup.test.ts', 'test/docs/examples.test.ts']) {
    t.ok(users.includes(file), `${file} uses it`)
  }
})
