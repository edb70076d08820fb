// A redis-server of the test's own, on a free port, so a test may kill and
// restart it without touching the shared one. No persistence (--save '',
// --appendonly no): a restart comes back empty, as the shipped compose file's
// Redis does. Skipped with the reason when redis-server is not installed,
// unless CHATD_REQUIRE_SERVICES=1 (then the test fails; see services.ts).

import { spawn, spawnSync, type ChildProcess } from 'node:child_process'
import { connect } from 'node:net'
import type { Test } from 'tap'
import { freePort } from './chatd-process.ts'

export interface RedisProcess {
  url: string
  port: number
  /** SIGKILL: gone at once, every connection reset, nothing saved. */
  kill9: () => Promise<void>
  /** Starts it again on the same port (empty). */
  restart: () => Promise<void>
}

const BINARY = process.env.REDIS_SERVER_BIN ?? 'redis-server'

function installed (): boolean {
  return spawnSync(BINARY, ['--version'], { stdio: 'ignore' }).status === 0
}

async function accepting (port: number): Promise<boolean> {
  return new Promise(resolve => {
    const socket = connect({ host: '127.0.0.1', port })
    socket.once('connect', () => { socket.destroy(); resolve(true) })
    socket.once('error', () => resolve(false))
  })
}

/** Undefined when the test was skipped (no redis-server). */
export async function ownRedis (t: Test): Promise<RedisProcess | undefined> {
  if (!installed()) {
    const reason = `${BINARY} is not installed (set REDIS_SERVER_BIN to one)`
    if (process.env.CHATD_REQUIRE_SERVICES === '1') t.fail(`${reason}, and CHATD_REQUIRE_SERVICES=1 says it must be`)
    else t.pass(`${t.name} needs redis-server`, { skip: reason })
    return undefined
  }
  const port = await freePort()
  let child: ChildProcess | undefined

  const start = async (): Promise<void> => {
    child = spawn(BINARY, ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no'], { stdio: 'ignore' })
    const deadline = Date.now() + 10_000
    while (!await accepting(port)) {
      if (Date.now() > deadline || child.exitCode !== null) throw new Error(`redis-server did not start on port ${port}`)
      await new Promise(resolve => setTimeout(resolve, 20))
    }
  }
  const kill9 = async (): Promise<void> => {
    if (!child || child.exitCode !== null || child.signalCode !== null) return
    const exited = new Promise(resolve => child!.once('exit', resolve))
    child.kill('SIGKILL')
    await exited
  }
  t.teardown(kill9)
  await start()
  return { url: `redis://127.0.0.1:${port}`, port, kill9, restart: start }
}
