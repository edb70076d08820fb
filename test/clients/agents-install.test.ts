// `npm run test:agents-install` (scripts/agents.ts) has one time budget for the whole run
// (CHATD_AGENTS_INSTALL_TIMEOUT_S), so a registry that does not answer cannot hold CI: here npm
// is pointed at a registry on loopback that accepts connections and never answers, with npm's own
// fetch timeout far beyond the test, and a budget of 2 s. The install must stop on the budget,
// saying so, with nothing installed. It installs into a folder of the test's own (CHATD_AGENTS_DIR),
// with an npm cache of its own, never the agents the other tests use.

import { execFile } from 'node:child_process'
import { readFileSync } from 'node:fs'
import net from 'node:net'
import { join } from 'node:path'
import t, { type Test } from 'tap'
import { AGENTS, DEFAULT_INSTALL_BUDGET_S, INSTALL_BUDGET_ENV } from '../../scripts/agents.ts'
import { REPO_ROOT } from '../helpers/models.ts'

/** A registry that takes every connection and never says a word; counts them. */
async function silentRegistry (t: Test): Promise<{ url: string; connections: () => number }> {
  const sockets = new Set<net.Socket>()
  let connections = 0
  const server = net.createServer(socket => {
    connections++
    sockets.add(socket)
    socket.on('error', () => {})
    socket.on('close', () => sockets.delete(socket))
  })
  server.listen(0, '127.0.0.1')
  await new Promise(resolve => server.once('listening', resolve))
  t.teardown(() => {
    for (const socket of sockets) socket.destroy()
    server.close()
  })
  return { url: `http://127.0.0.1:${(server.address() as net.AddressInfo).port}/`, connections: () => connections }
}

interface Install { code: number | null; stdout: string; stderr: string; ms: number }

/** Runs scripts/agents.ts with `env` over a clean environment; killed (code null) after a minute. */
function runInstall (env: Record<string, string>): Promise<Install> {
  // Nothing of tap's or of an npm script's own settings: only what the test sets reaches npm.
  const base = Object.fromEntries(Object.entries(process.env).filter(([name]) => !/^(TAP|_TAPJS|NODE_V8_COVERAGE|npm_|CHATD_AGENTS)/i.test(name)))
  const started = Date.now()
  return new Promise(resolve => {
    execFile(process.execPath, [join(REPO_ROOT, 'scripts/agents.ts')], { env: { ...base, ...env }, timeout: 60_000, killSignal: 'SIGKILL' }, (err, stdout, stderr) => {
      const code = err ? (typeof err.code === 'number' ? err.code : null) : 0
      resolve({ code, stdout, stderr, ms: Date.now() - started })
    })
  })
}

/** The budget of the silent registry's run: long enough for npm to start and ask on a busy 2-core machine. */
const BUDGET_S = 6

t.test('a registry that never answers: the install stops when its budget runs out, saying so', async t => {
  const registry = await silentRegistry(t)
  const dir = t.testdir()
  const run = await runInstall({
    CHATD_AGENTS_DIR: join(dir, 'agents'),
    [INSTALL_BUDGET_ENV]: String(BUDGET_S),
    npm_config_registry: registry.url,
    npm_config_cache: join(dir, 'npm-cache'),
    // npm's own limit (per request, no retries) is ten minutes: only the budget can stop it in time.
    npm_config_fetch_timeout: '600000',
    npm_config_fetch_retries: '0',
    npm_config_update_notifier: 'false',
  })
  t.ok(registry.connections() > 0, 'npm asked the registry')
  t.equal(run.code, 1, `the install failed (stderr: ${run.stderr})`)
  const [codex, claude] = AGENTS.map(agent => `${agent.package}@${agent.version}`)
  t.match(run.stderr, `npm install ${codex} was stopped: the agents' install ran out of its time budget (${BUDGET_S} s for the whole run; ${INSTALL_BUDGET_ENV} sets it, ${DEFAULT_INSTALL_BUDGET_S} by default); not installed: ${codex}, ${claude}`)
  // An upper bound far above the budget and far below what npm would have waited by itself.
  t.ok(run.ms < 45_000, `it ended on the budget, not on npm's own timeout (${run.ms} ms for a ${BUDGET_S} s budget)`)
  t.comment(`the install ended ${run.ms} ms after it started, on a budget of ${BUDGET_S} s`)
})

t.test('a budget that is not a number of seconds is refused before anything runs', async t => {
  const dir = t.testdir()
  for (const value of ['soon', '0', '-5']) {
    const run = await runInstall({ CHATD_AGENTS_DIR: join(dir, 'agents'), [INSTALL_BUDGET_ENV]: value, npm_config_registry: 'http://127.0.0.1:2/' })
    t.equal(run.code, 2, value)
    t.match(run.stderr, `${INSTALL_BUDGET_ENV}=${value}: not a number of seconds above 0`)
  }
})

t.test('the default budget is at most 8 minutes, and documented where the install is', async t => {
  t.ok(DEFAULT_INSTALL_BUDGET_S <= 8 * 60, `${DEFAULT_INSTALL_BUDGET_S} s`)
  const development = readFileSync(join(REPO_ROOT, 'docs/development.md'), 'utf8')
  t.match(development, `\`${INSTALL_BUDGET_ENV}\``, 'docs/development.md names the variable')
  t.match(development, `${DEFAULT_INSTALL_BUDGET_S / 60} minutes`, 'and its default')
})
