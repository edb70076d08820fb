// The two agents whose own binaries the client tests drive: the Codex CLI and Claude Code. Each
// ships a native binary of about 400 MB per platform, so neither is a dependency every `npm ci`
// downloads. `npm run test:agents-install` puts the pinned versions into one cache folder outside
// any clone (CHATD_AGENTS_DIR, default ~/.cache/chatd/agents/<agent>-<version>), where they stay
// between clones and CI runs; installing again is a no-op. The whole run has one time limit
// (CHATD_AGENTS_INSTALL_TIMEOUT_S, 8 minutes by default). The tests find them through
// `agentCommand` (test/helpers/agents.ts) and skip, saying how to install, when one is missing (a
// failure under CHATD_REQUIRE_SERVICES=1, as in CI, which installs them first).

import { spawnSync } from 'node:child_process'
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs'
import { homedir } from 'node:os'
import { join } from 'node:path'

export interface Agent {
  /** What the tests and this script call it. */
  name: 'codex' | 'claude-code'
  /** Its npm package and the version its test was written against (request shapes captured in docs/api.md). */
  package: string
  version: string
  /** The file to run, relative to the package's folder. */
  entry: string
  /** Run with Node (a launcher script) rather than as a program of its own. */
  viaNode: boolean
  /** npm holds back install scripts; this package's must run to put its native binary in place. */
  runInstallScript?: string
}

export const CODEX: Agent = { name: 'codex', package: '@openai/codex', version: '0.169.0', entry: 'bin/codex.js', viaNode: true }
export const CLAUDE_CODE: Agent = { name: 'claude-code', package: '@anthropic-ai/claude-code', version: '2.1.332', entry: 'bin/claude.exe', viaNode: false, runInstallScript: 'install.cjs' }
export const AGENTS = [CODEX, CLAUDE_CODE]

/** The folder that holds this version of the agent (its own package.json, so npm installs there and nowhere above). */
export function agentDir (agent: Agent): string {
  const root = process.env.CHATD_AGENTS_DIR ?? join(process.env.XDG_CACHE_HOME ?? join(homedir(), '.cache'), 'chatd', 'agents')
  return join(root, `${agent.name}-${agent.version}`)
}

const packageDir = (agent: Agent): string => join(agentDir(agent), 'node_modules', ...agent.package.split('/'))

/** The command that runs the installed agent ([program, ...args]), or why there is none. */
export function installedAgent (agent: Agent): { command: string[] } | { missing: string } {
  const entry = join(packageDir(agent), agent.entry)
  let version: string | undefined
  try {
    version = (JSON.parse(readFileSync(join(packageDir(agent), 'package.json'), 'utf8')) as { version?: string }).version
  } catch {}
  if (version !== agent.version || !existsSync(entry)) {
    return { missing: `${agent.package}@${agent.version} is not installed in ${agentDir(agent)}; run npm run test:agents-install (CHATD_AGENTS_DIR picks the folder)` }
  }
  return { command: agent.viaNode ? [process.execPath, entry] : [entry] }
}

/** The whole run's time limit when INSTALL_BUDGET_ENV does not set one: a cold install of both is about 800 MB. */
export const DEFAULT_INSTALL_BUDGET_S = 480
export const INSTALL_BUDGET_ENV = 'CHATD_AGENTS_INSTALL_TIMEOUT_S'

/**
 * One time limit for the whole run, so a registry that is slow or does not answer cannot hold CI
 * for long: each step (npm install, an install script, `--version`) gets what is left of it, and
 * the first one it cuts short ends the run.
 */
class Budget {
  readonly seconds: number
  readonly #deadline: number
  constructor (seconds: number) {
    this.seconds = seconds
    this.#deadline = Date.now() + seconds * 1000
  }

  /** Milliseconds left, at most `cap`. */
  left (cap = Infinity): number {
    return Math.max(0, Math.min(cap, Math.ceil(this.#deadline - Date.now())))
  }

  /** The error that ends the run: `step` was cut short, or could not start, for want of time. */
  spent (step: string): OutOfTime {
    return new OutOfTime(`${step} was stopped: the agents' install ran out of its time budget (${this.seconds} s for the whole run; ${INSTALL_BUDGET_ENV} sets it, ${DEFAULT_INSTALL_BUDGET_S} by default)`)
  }
}

class OutOfTime extends Error {}

/** Runs one step with what is left of the budget (and at most `capMs`); its failure is said on stderr. */
function step (budget: Budget, what: string, program: string, args: string[], options: { cwd?: string; capMs?: number; encoding?: 'utf8' }): { ok: boolean; stdout: string; stderr: string } {
  const timeout = budget.left(options.capMs)
  if (timeout === 0) throw budget.spent(what)
  // SIGKILL: the limit is the limit, whatever the step does with a SIGTERM. stdio is inherited
  // unless the output is wanted, so a grandchild holding it open cannot keep the run waiting.
  const run = spawnSync(program, args, { cwd: options.cwd, timeout, killSignal: 'SIGKILL', ...(options.encoding ? { encoding: options.encoding } : { stdio: 'inherit' }) })
  if ((run.error as NodeJS.ErrnoException | undefined)?.code === 'ETIMEDOUT' && timeout < (options.capMs ?? Infinity)) throw budget.spent(what)
  if (run.status !== 0) console.error(`${what} failed: ${run.error?.message ?? (run.signal ? `killed by ${run.signal}` : `exit ${run.status}`)}${run.stderr ? `: ${String(run.stderr)}` : ''}`)
  return { ok: run.status === 0, stdout: String(run.stdout ?? ''), stderr: String(run.stderr ?? '') }
}

function install (agent: Agent, budget: Budget): boolean {
  const dir = agentDir(agent)
  const ready = installedAgent(agent)
  if ('command' in ready && check(agent, ready.command, budget)) {
    console.log(`${agent.package}@${agent.version} is installed in ${dir}`)
    return true
  }
  mkdirSync(dir, { recursive: true })
  writeFileSync(join(dir, 'package.json'), JSON.stringify({ name: `chatd-${agent.name}`, private: true }) + '\n')
  console.log(`installing ${agent.package}@${agent.version} into ${dir} (about 400 MB)`)
  // The platform's binary comes as one of the package's optional dependencies: they must not be omitted.
  if (!step(budget, `npm install ${agent.package}@${agent.version}`, 'npm', [
    'install', '--prefix', dir, '--no-save', '--no-package-lock', '--no-audit', '--no-fund', '--loglevel=error',
    '--ignore-scripts', '--include=optional', `${agent.package}@${agent.version}`,
  ], {}).ok) return false
  if (agent.runInstallScript && !step(budget, `${agent.package}'s ${agent.runInstallScript}`, process.execPath, [agent.runInstallScript], { cwd: packageDir(agent) }).ok) return false
  const installed = installedAgent(agent)
  if ('missing' in installed) {
    console.error(installed.missing)
    return false
  }
  return check(agent, installed.command, budget)
}

/** `--version` answers: the binary for this platform is in place. */
function check (agent: Agent, command: string[], budget: Budget): boolean {
  const [program, ...args] = command
  const run = step(budget, `${agent.name} --version (no binary for ${process.platform}-${process.arch}?)`, program!, [...args, '--version'], { capMs: 30_000, encoding: 'utf8' })
  if (run.ok) console.log(`${agent.name}: ${run.stdout.trim()}`)
  return run.ok
}

/** The budget INSTALL_BUDGET_ENV sets, in seconds; undefined when it is not a positive number. */
function budgetSeconds (): number | undefined {
  const value = process.env[INSTALL_BUDGET_ENV]
  if (value === undefined || value === '') return DEFAULT_INSTALL_BUDGET_S
  const seconds = Number(value)
  return Number.isFinite(seconds) && seconds > 0 ? seconds : undefined
}

if (import.meta.main) {
  // `node scripts/agents.ts [codex|claude-code]...`: the named agents, or both.
  const names = process.argv.slice(2)
  const chosen = names.length === 0 ? AGENTS : AGENTS.filter(agent => names.includes(agent.name))
  const seconds = budgetSeconds()
  if (names.length > 0 && chosen.length !== names.length) {
    console.error(`unknown agent in ${names.join(' ')}; known: ${AGENTS.map(a => a.name).join(', ')}`)
    process.exitCode = 2
  } else if (seconds === undefined) {
    console.error(`${INSTALL_BUDGET_ENV}=${process.env[INSTALL_BUDGET_ENV]}: not a number of seconds above 0`)
    process.exitCode = 2
  } else {
    const budget = new Budget(seconds)
    const left = [...chosen]
    let ok = true
    try {
      while (left.length > 0) {
        ok = install(left[0]!, budget) && ok
        left.shift()
      }
    } catch (err) {
      if (!(err instanceof OutOfTime)) throw err
      console.error(`${err.message}; not installed: ${left.map(agent => `${agent.package}@${agent.version}`).join(', ')}`)
      ok = false
    }
    process.exitCode = ok ? 0 : 1
  }
}
