// The two agents whose own binaries the client tests drive: the Codex CLI and Claude Code. Each
// ships a native binary of about 400 MB per platform, so neither is a dependency every `npm ci`
// downloads. `npm run test:agents-install` puts the pinned versions into one cache folder outside
// any clone (CHATD_AGENTS_DIR, default ~/.cache/chatd/agents/<agent>-<version>), where they stay
// between clones and CI runs; installing again is a no-op. The tests find them through
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

// A slow registry must not hold CI for long: the whole run has a budget of its own.
const INSTALL_TIMEOUT_MS = 5 * 60_000

function install (agent: Agent): boolean {
  const dir = agentDir(agent)
  const ready = installedAgent(agent)
  if ('command' in ready && check(agent, ready.command)) {
    console.log(`${agent.package}@${agent.version} is installed in ${dir}`)
    return true
  }
  mkdirSync(dir, { recursive: true })
  writeFileSync(join(dir, 'package.json'), JSON.stringify({ name: `chatd-${agent.name}`, private: true }) + '\n')
  console.log(`installing ${agent.package}@${agent.version} into ${dir} (about 400 MB)`)
  // The platform's binary comes as one of the package's optional dependencies: they must not be omitted.
  const npm = spawnSync('npm', [
    'install', '--prefix', dir, '--no-save', '--no-package-lock', '--no-audit', '--no-fund', '--loglevel=error',
    '--ignore-scripts', '--include=optional', `${agent.package}@${agent.version}`,
  ], { stdio: 'inherit', timeout: INSTALL_TIMEOUT_MS })
  if (npm.status !== 0) {
    console.error(`npm install ${agent.package}@${agent.version} failed: ${npm.error?.message ?? `exit ${npm.status}`}`)
    return false
  }
  if (agent.runInstallScript) {
    const script = spawnSync(process.execPath, [agent.runInstallScript], { cwd: packageDir(agent), stdio: 'inherit', timeout: INSTALL_TIMEOUT_MS })
    if (script.status !== 0) {
      console.error(`${agent.package}'s ${agent.runInstallScript} failed: ${script.error?.message ?? `exit ${script.status}`}`)
      return false
    }
  }
  const installed = installedAgent(agent)
  if ('missing' in installed) {
    console.error(installed.missing)
    return false
  }
  return check(agent, installed.command)
}

/** `--version` answers: the binary for this platform is in place. */
function check (agent: Agent, command: string[]): boolean {
  const [program, ...args] = command
  const run = spawnSync(program!, [...args, '--version'], { encoding: 'utf8', timeout: 30_000 })
  if (run.status !== 0) {
    console.error(`${agent.name} --version failed (no binary for ${process.platform}-${process.arch}?): ${run.stderr || run.error?.message}`)
    return false
  }
  console.log(`${agent.name}: ${run.stdout.trim()}`)
  return true
}

if (import.meta.main) {
  // `node scripts/agents.ts [codex|claude-code]...`: the named agents, or both.
  const names = process.argv.slice(2)
  const chosen = names.length === 0 ? AGENTS : AGENTS.filter(agent => names.includes(agent.name))
  if (names.length > 0 && chosen.length !== names.length) {
    console.error(`unknown agent in ${names.join(' ')}; known: ${AGENTS.map(a => a.name).join(', ')}`)
    process.exitCode = 2
  } else {
    let ok = true
    for (const agent of chosen) ok = install(agent) && ok
    process.exitCode = ok ? 0 : 1
  }
}
