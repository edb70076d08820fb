// The `chatd` command run in the test's own process (src/cli.ts's run), its
// printed lines kept, and environment variables set for one test only.
import type { Test } from 'tap'
import { run } from '../../src/cli.ts'

export interface CliResult {
  /** The exit code run() returned (0 done, 1 failed, 2 a usage error). */
  code: number
  /** What it printed to standard output, a line each. */
  out: string
  /** What it printed to standard error, a line each. */
  err: string
}

/** Runs `chatd <args>` in this process and returns its exit code and what it printed. */
export async function cli (args: string[]): Promise<CliResult> {
  let out = ''
  let err = ''
  const code = await run(args, line => { out += line + '\n' }, line => { err += line + '\n' })
  return { code, out, err }
}

/** Sets `env` in process.env until `t` ends, then puts back what was there (or nothing). */
export function withEnv (t: Test, env: Record<string, string>): void {
  const saved = Object.fromEntries(Object.keys(env).map(k => [k, process.env[k]]))
  Object.assign(process.env, env)
  t.teardown(() => {
    for (const [k, v] of Object.entries(saved)) {
      if (v === undefined) delete process.env[k]
      else process.env[k] = v
    }
  })
}
