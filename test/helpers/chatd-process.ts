// A real `chatd serve` child process for the fault tests: started with the
// test's Node (Node 24), killed however the test likes (SIGKILL mid-load
// included) and started again on the same files. Its output is kept so a
// failure shows what the server said. Stopped when the test ends.

import { spawn, type ChildProcess } from 'node:child_process'
import { once } from 'node:events'
import { createServer } from 'node:net'
import { join } from 'node:path'
import type { Test } from 'tap'
import { REPO_ROOT } from './models.ts'

export interface ChatdProcess {
  child: ChildProcess
  /** http://127.0.0.1:<port> */
  url: string
  /** stdout and stderr so far. */
  output: () => string
  /** Resolves with the exit code, or the signal that ended it. */
  exited: Promise<number | string | null>
  /** SIGKILL: no shutdown hook runs, as in a crash or an OOM kill. Resolves once it has gone. */
  kill9: () => Promise<void>
}

/** A TCP port nothing listens on right now (the OS picks it; closed again before use). */
export async function freePort (): Promise<number> {
  const server = createServer()
  server.listen(0, '127.0.0.1')
  await once(server, 'listening')
  const { port } = server.address() as { port: number }
  await new Promise(resolve => server.close(resolve))
  return port
}

/**
 * Starts `chatd serve` with `env` over the test's environment (a variable
 * given as undefined is removed) and resolves once /readyz answers 200
 * (listening, a model ready). `cwd`: the working directory, chatd's own by
 * default (as `npm start` runs it).
 */
export async function startChatd (t: Test, env: Record<string, string | undefined>, opts: { readyWithinMs?: number; cwd?: string } = {}): Promise<ChatdProcess> {
  // The port is chosen here rather than read from the log, so LOG_LEVEL can stay quiet. Between
  // freePort() and the child's listen another process may take it (the OS hands a freed port out
  // again readily): the child then exits with EADDRINUSE, and a new port is tried.
  for (let attempt = 1; ; attempt++) {
    try {
      return await startOnce(t, env, opts, await freePort())
    } catch (err) {
      if (!(err instanceof PortTaken) || attempt === 3) throw err
    }
  }
}

/** The child could not listen: its port was taken after freePort() chose it. */
class PortTaken extends Error {}

async function startOnce (t: Test, env: Record<string, string | undefined>, opts: { readyWithinMs?: number; cwd?: string }, port: number): Promise<ChatdProcess> {
  const childEnv: Record<string, string | undefined> = { ...process.env, HOST: '127.0.0.1', LOG_LEVEL: 'warn', CHATD_AUTO_PULL: '0', ...env, PORT: String(port) }
  for (const [name, value] of Object.entries(childEnv)) if (value === undefined) delete childEnv[name]
  const child = spawn(process.execPath, [join(REPO_ROOT, 'src/cli.ts'), 'serve'], {
    cwd: opts.cwd ?? REPO_ROOT,
    env: childEnv,
    stdio: ['ignore', 'pipe', 'pipe'],
  })
  let output = ''
  child.stdout!.on('data', chunk => { output += chunk })
  child.stderr!.on('data', chunk => { output += chunk })
  const exited = new Promise<number | string | null>(resolve => child.once('exit', (code, signal) => resolve(signal ?? code)))
  const gone = (): boolean => child.exitCode !== null || child.signalCode !== null
  t.teardown(async () => {
    if (gone()) return
    child.kill('SIGTERM')
    const timer = setTimeout(() => child.kill('SIGKILL'), 10_000)
    await exited
    clearTimeout(timer)
  })

  const url = `http://127.0.0.1:${port}`
  const deadline = Date.now() + (opts.readyWithinMs ?? 30_000)
  while (!gone()) {
    const res = await fetch(`${url}/readyz`).catch(() => undefined)
    if (res?.status === 200) break
    if (Date.now() > deadline) break
    await new Promise(resolve => setTimeout(resolve, 100))
  }
  if (gone() || Date.now() > deadline) {
    const message = `chatd did not become ready at ${url} (exit ${child.exitCode ?? child.signalCode}):\n${output}`
    throw gone() && /EADDRINUSE/.test(output) ? new PortTaken(message) : new Error(message)
  }
  return {
    child,
    url,
    output: () => output,
    exited,
    kill9: async () => {
      if (!gone()) child.kill('SIGKILL')
      await exited
    },
  }
}
