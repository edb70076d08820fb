// Runs the external programs the llama.cpp comparison needs (npm, tar, git,
// cmake, the llama.cpp tools) with one error shape, so a failure names the
// command and shows the end of its output instead of a bare exit status.
import { spawnSync } from 'node:child_process'
import fs from 'node:fs'

export interface ExecOptions {
  cwd?: string
  /** Where stdout and stderr go: a log file (appended), or captured and returned. */
  log?: string
  env?: NodeJS.ProcessEnv
}

export interface ExecResult {
  stdout: string
  stderr: string
  seconds: number
}

/** llama.cpp cannot be measured here (no compiler, no cmake): the caller skips it instead of failing. */
export class LlamaCppUnavailable extends Error {}

export function exec (cmd: string, args: string[], opts: ExecOptions = {}): ExecResult {
  const started = performance.now()
  let logFd: number | undefined
  if (opts.log) logFd = fs.openSync(opts.log, 'a')
  try {
    if (logFd !== undefined) fs.writeSync(logFd, `\n$ ${[cmd, ...args].join(' ')}\n`)
    const r = spawnSync(cmd, args, {
      cwd: opts.cwd,
      env: opts.env ?? process.env,
      encoding: 'utf8',
      // Captured output can be large (cmake, llama.cpp's load log); the log file has no limit.
      maxBuffer: 256 * 2 ** 20,
      stdio: logFd === undefined ? ['ignore', 'pipe', 'pipe'] : ['ignore', logFd, logFd],
    })
    if (r.error) throw new Error(`${cmd}: ${r.error.message}`)
    if (r.status !== 0) {
      const tail = logFd !== undefined ? tailOf(opts.log as string) : `${r.stdout ?? ''}${r.stderr ?? ''}`.slice(-4000)
      throw new Error(`\`${[cmd, ...args].join(' ')}\` exited with ${r.status ?? r.signal}${opts.log ? ` (log: ${opts.log})` : ''}\n${tail}`)
    }
    return { stdout: r.stdout ?? '', stderr: r.stderr ?? '', seconds: (performance.now() - started) / 1000 }
  } finally {
    if (logFd !== undefined) fs.closeSync(logFd)
  }
}

/** Whether a program answers `--version` (so it is installed and on PATH). */
export function hasProgram (cmd: string): boolean {
  const r = spawnSync(cmd, ['--version'], { stdio: 'ignore' })
  return !r.error && r.status === 0
}

function tailOf (file: string): string {
  const text = fs.readFileSync(file, 'utf8')
  return text.slice(-4000)
}
