// SIGTERM on a real `chatd serve` process (this test's Node running
// src/cli.ts, the real stories260k model) while streams are in flight:
//   - with a grace period long enough, every stream finishes whole, new
//     connections are refused, and the process exits 0 once they are done;
//   - with a short SHUTDOWN_GRACE_MS, the streams still running at the
//     deadline are ended with an error event (not a cut socket), every admitted
//     request still has its usage row, and the process exits 0 on its own.
// MAX_BATCH=1 makes the streams take turns, so some are certainly still
// running when the signal comes.

import { spawn, type ChildProcess } from 'node:child_process'
import { request as httpRequest } from 'node:http'
import { join } from 'node:path'
import t, { type Test } from 'tap'
import { loadConfig } from '../../src/config.ts'
import { openDatabase } from '../../src/store/database.ts'
import { streamChat, type StreamOutcome } from '../helpers/load/sse-client.ts'
import { REPO_ROOT, storiesModelEntry } from '../helpers/models.ts'
import { perDevice } from '../helpers/test-device.ts'

const KEY = `sk-chatd-${'sigTerm0'.repeat(4)}`
const MODEL = 'stories260k'
// Greedy, this prompt runs to about 340 tokens before the model ends the story: streams still
// running when the signal comes. A software renderer (the WebGPU twin in CI) decodes ~25x slower,
// so there 80 tokens a stream keep them running as long.
const STORY = { model: MODEL, messages: [{ role: 'user', content: 'Once upon a time' }], temperature: 0, max_tokens: perDevice({ cpu: 450, webgpu: 80 }) }

interface Server {
  child: ChildProcess
  base: string
  dbUrl: string
  exited: Promise<{ code: number | null; at: number }>
  output: () => string
}

async function serve (t: Test, env: Record<string, string>): Promise<Server> {
  const dir = t.testdir({ 'models.json': JSON.stringify({ models: [storiesModelEntry(MODEL)] }) })
  const dbUrl = `sqlite://${join(dir, 'chatd.db')}`
  const child = spawn(process.execPath, ['src/cli.ts', 'serve'], {
    cwd: REPO_ROOT,
    env: {
      ...process.env,
      PORT: '0',
      HOST: '127.0.0.1',
      LOG_LEVEL: 'info',
      DATABASE_URL: dbUrl,
      MODELS_FILE: join(dir, 'models.json'),
      CHATD_ADMIN_KEY: KEY,
      CHATD_AUTO_PULL: '0',
      MAX_BATCH: '1',
      QUEUE_SIZE: '16',
      // Streams waiting for their turn get their 200 and keep-alive comments at once.
      SSE_KEEPALIVE_MS: '50',
      ...env,
    },
    stdio: ['ignore', 'pipe', 'pipe'],
  })
  let output = ''
  child.stdout!.on('data', chunk => { output += chunk })
  child.stderr!.on('data', chunk => { output += chunk })
  const exited = new Promise<{ code: number | null; at: number }>(resolve => child.once('exit', code => resolve({ code, at: performance.now() })))
  t.teardown(() => { if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL') })

  const deadline = Date.now() + 60_000
  let base = ''
  for (;;) {
    if (Date.now() > deadline || child.exitCode !== null) throw new Error(`chatd did not become ready:\n${output}`)
    const port = /listening at http:\/\/127\.0\.0\.1:(\d+)/.exec(output)?.[1]
    if (port) {
      base = `http://127.0.0.1:${port}`
      if (await fetch(`${base}/readyz`).then(r => r.ok, () => false)) break
    }
    await new Promise(resolve => setTimeout(resolve, 50))
  }
  return { child, base, dbUrl, exited, output: () => output }
}

/** Starts `n` streams and resolves once every one has its response head (200). */
async function startStreams (server: Server, n: number): Promise<Array<Promise<StreamOutcome>>> {
  let headed = 0
  let allHeaded!: () => void
  const ready = new Promise<void>(resolve => { allHeaded = resolve })
  const streams = Array.from({ length: n }, () => streamChat({
    base: server.base,
    key: KEY,
    body: STORY,
    onHeaders: () => { if (++headed === n) allHeaded() },
  }))
  await Promise.race([ready, Promise.all(streams).then(() => { throw new Error('the streams ended before all had started') })])
  return streams
}

/** A request on a connection of its own (no pooled keep-alive one): its status, or the connection error's code. */
function freshRequest (base: string): Promise<{ status?: number; body?: string; error?: string }> {
  return new Promise(resolve => {
    const req = httpRequest(`${base}/api/v1/models`, { agent: false, headers: { authorization: `Bearer ${KEY}` } }, res => {
      let body = ''
      res.on('data', chunk => { body += chunk })
      res.on('end', () => resolve({ status: res.statusCode, body }))
    })
    req.on('error', err => resolve({ error: (err as NodeJS.ErrnoException).code ?? err.message }))
    req.end()
  })
}

t.test('SIGTERM with time to spare: in-flight streams finish whole, new requests are refused, exit 0', async t => {
  const server = await serve(t, { SHUTDOWN_GRACE_MS: '60000' })
  const streams = await startStreams(server, 4)
  const signalled = performance.now()
  server.child.kill('SIGTERM')

  await new Promise(resolve => setTimeout(resolve, 100))
  const late = await freshRequest(server.base)
  t.ok(late.error === 'ECONNREFUSED' || (late.status === 503 && /server_overloaded/.test(late.body ?? '')),
    `a new request while draining is refused (${JSON.stringify(late)})`)

  const outcomes = await Promise.all(streams)
  const lastEnded = performance.now()
  for (const [i, o] of outcomes.entries()) {
    t.equal(o.status, 200, `stream ${i}: 200`)
    t.equal(o.networkError, undefined, `stream ${i}: no connection error`)
    t.equal(o.malformed, undefined, `stream ${i}: well-formed`)
    t.ok(o.done, `stream ${i}: ended with [DONE]`)
    t.ok(o.finishReason === 'stop' || o.finishReason === 'length', `stream ${i}: finished (${o.finishReason})`)
  }
  const exit = await server.exited
  t.equal(exit.code, 0, `exit code 0\n${server.output().slice(-2000)}`)
  t.ok(exit.at >= lastEnded - 50, 'the process waited for the streams')
  t.ok(exit.at - lastEnded < 10_000, `and exited promptly after them (${Math.round(exit.at - lastEnded)} ms after the last one ended, ${Math.round(exit.at - signalled)} ms after SIGTERM)`)
  t.match(server.output(), /shutting down: draining in-flight requests/)
})

t.test('SIGTERM with a short grace: streams running at the deadline end with an error event, usage is kept, exit 0', async t => {
  const graceMs = 300
  const server = await serve(t, { SHUTDOWN_GRACE_MS: String(graceMs) })
  const streams = await startStreams(server, 6)
  const signalled = performance.now()
  server.child.kill('SIGTERM')

  const outcomes = await Promise.all(streams)
  let cut = 0
  for (const [i, o] of outcomes.entries()) {
    t.equal(o.status, 200, `stream ${i}: 200`)
    t.equal(o.networkError, undefined, `stream ${i}: the body ended properly, not with a cut connection`)
    if (o.done) {
      t.equal(o.malformed, undefined, `stream ${i}: finished before the deadline, well-formed`)
    } else {
      cut++
      t.match(o.errorEvent, { code: 'server_overloaded', type: 'server_error', message: /shut down/ }, `stream ${i}: ended by the deadline with an error event`)
    }
  }
  t.ok(cut >= 1, `streams still running at the deadline were ended (${cut} of ${outcomes.length})`)

  const exit = await server.exited
  const tookMs = exit.at - signalled
  t.equal(exit.code, 0, `exit code 0 (not killed by the backstop)\n${server.output().slice(-2000)}`)
  t.ok(tookMs >= graceMs - 50 && tookMs < graceMs + 8000, `exited after the grace period (${Math.round(tookMs)} ms after SIGTERM)`)

  // Every admitted request, cut or not, has its usage row.
  const db = openDatabase(loadConfig({ DATABASE_URL: server.dbUrl }).database)
  t.teardown(() => db.destroy())
  const rows = await db.selectFrom('usage_records').select(['status', 'completion_tokens']).execute()
  t.equal(rows.length, outcomes.length, 'one usage row per stream')
  t.equal(rows.filter(r => r.status === 'completed').length, outcomes.length - cut, 'the whole ones as completed')
  t.equal(rows.filter(r => r.status === 'cancelled').length, cut, 'the cut ones as cancelled, with the tokens they got')
})
