// Runs an ES module's source in a child Node process (the test's Node), for tests whose subject is
// how a process ends: a child that never exits is killed after `killAfterMs`, and its exit code
// (null) says so, instead of the test hanging.
import { spawn } from 'node:child_process'
import { once } from 'node:events'

export interface ScriptRun {
  /** The exit code; null when the child had to be killed. */
  code: number | null
  stdout: string
  stderr: string
}

export async function runModuleSource (source: string, opts: { args?: string[]; cwd?: string; env?: NodeJS.ProcessEnv; killAfterMs: number }): Promise<ScriptRun> {
  const child = spawn(process.execPath, ['--input-type=module', '-e', source, ...(opts.args ?? [])], { cwd: opts.cwd, env: opts.env, stdio: ['ignore', 'pipe', 'pipe'] })
  let stdout = ''
  let stderr = ''
  child.stdout.on('data', chunk => { stdout += chunk })
  child.stderr.on('data', chunk => { stderr += chunk })
  const timer = setTimeout(() => child.kill('SIGKILL'), opts.killAfterMs)
  const [code] = await once(child, 'exit') as [number | null]
  clearTimeout(timer)
  return { code, stdout, stderr }
}
