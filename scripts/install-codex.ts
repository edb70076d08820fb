// npm run test:codex-install: installs the Codex CLI that test/clients/codex.test.ts drives,
// at one pinned version, into .cache/codex/ (ignored by git). It is not a dependency: the npm
// package carries a native binary of about 400 MB per platform, which no user's `npm ci` should
// download. CI runs this before the tests (.ci/run); without it the Codex test skips, saying
// how to install. Installing again is a no-op once that version is there.

import { spawnSync } from 'node:child_process'
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'

/** The Codex CLI version the test was written against (its request shapes are captured in docs/api.md). */
export const CODEX_VERSION = '0.169.0'

const ROOT = new URL('..', import.meta.url).pathname
export const CODEX_DIR = join(ROOT, '.cache', 'codex')
/** The package's launcher: a Node script that finds the platform's binary and runs it. */
export const CODEX_ENTRY = join(CODEX_DIR, 'node_modules', '@openai', 'codex', 'bin', 'codex.js')
// A slow registry must not hold CI for long: the whole run has a budget of its own.
const INSTALL_TIMEOUT_MS = 5 * 60_000

/** The installed version, or undefined when none is (or the install is incomplete). */
export function installedCodexVersion (): string | undefined {
  if (!existsSync(CODEX_ENTRY)) return undefined
  try {
    const pkg = JSON.parse(readFileSync(join(CODEX_DIR, 'node_modules', '@openai', 'codex', 'package.json'), 'utf8')) as { version?: string }
    return pkg.version
  } catch {
    return undefined
  }
}

function install (): number {
  if (installedCodexVersion() === CODEX_VERSION) {
    console.log(`@openai/codex@${CODEX_VERSION} is already in ${CODEX_DIR}`)
    return 0
  }
  mkdirSync(CODEX_DIR, { recursive: true })
  // A package.json of its own, so npm installs here and never into the project above it.
  writeFileSync(join(CODEX_DIR, 'package.json'), JSON.stringify({ name: 'chatd-codex-cache', private: true }) + '\n')
  console.log(`installing @openai/codex@${CODEX_VERSION} into ${CODEX_DIR} (about 400 MB)`)
  // The platform's binary comes as one of the package's optional dependencies, so optional
  // dependencies must not be omitted; the package needs no install scripts.
  const result = spawnSync('npm', [
    'install', '--prefix', CODEX_DIR, '--no-save', '--no-package-lock', '--no-audit', '--no-fund',
    '--ignore-scripts', '--include=optional', `@openai/codex@${CODEX_VERSION}`,
  ], { stdio: 'inherit', timeout: INSTALL_TIMEOUT_MS })
  if (result.error) {
    console.error(`npm install failed: ${result.error.message}`)
    return 1
  }
  if (result.status !== 0) return result.status ?? 1
  const version = installedCodexVersion()
  if (version !== CODEX_VERSION) {
    console.error(`after npm install, ${CODEX_ENTRY} is ${version === undefined ? 'missing' : `version ${version}`}`)
    return 1
  }
  const check = spawnSync(process.execPath, [CODEX_ENTRY, '--version'], { encoding: 'utf8', timeout: 30_000 })
  if (check.status !== 0) {
    console.error(`codex --version failed (no binary for ${process.platform}-${process.arch}?): ${check.stderr || check.error?.message}`)
    return 1
  }
  console.log(check.stdout.trim())
  return 0
}

if (import.meta.main) process.exitCode = install()
