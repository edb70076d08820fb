// The real server, in this process, on the real stories260k model: a SQLite
// database in the test's directory, the model under the given id, the given
// key as the admin's, and the model loaded before the test goes on. Tests that
// need the whole server (HTTP, worker thread, scheduler) on a real engine
// start here instead of each writing models.json and the readiness wait again.
import type { AddressInfo } from 'node:net'
import { join } from 'node:path'
import type { Test } from 'tap'
import type { FastifyInstance } from 'fastify'
import { loadConfig } from '../../src/config.ts'
import { startServer } from '../../src/server.ts'
import { storiesModelEntry } from './models.ts'

export interface StoriesServer {
  app: FastifyInstance
  /** http://127.0.0.1:<port> */
  url: string
}

export async function startStoriesServer (t: Test, opts: {
  modelId: string
  /** CHATD_ADMIN_KEY: the key requests use. */
  key: string
  /** More settings, e.g. QUEUE_SIZE; they win over the defaults here. */
  env?: Record<string, string>
  /** onnxruntime threads of the model (its models.json entry); onnxruntime's choice when absent. */
  threads?: number
  /** False when the test closes the server itself (and checks how). */
  closeOnTeardown?: boolean
  /** Another model directory (and its dtype) instead of chatd's own fp32 stories260k build. */
  modelDir?: string
  dtype?: string
}): Promise<StoriesServer> {
  const model = storiesModelEntry(opts.modelId, { path: opts.modelDir, dtype: opts.dtype, threads: opts.threads })
  const dir = t.testdir({ 'models.json': JSON.stringify({ models: [model] }) })
  const app = await startServer(loadConfig({
    PORT: '0',
    LOG_LEVEL: 'silent',
    DATABASE_URL: `sqlite://${join(dir, 'chatd.db')}`,
    MODELS_FILE: join(dir, 'models.json'),
    CHATD_ADMIN_KEY: opts.key,
    CHATD_AUTO_PULL: '0',
    ...opts.env,
  }), { print: () => {}, logger: false })
  // Bounded, as the server's own shutdown is (SHUTDOWN_GRACE_MS): a close that hangs is named on
  // stderr with what is still open, instead of holding the file until tap's timeout.
  if (opts.closeOnTeardown !== false) {
    t.teardown(async () => {
      let timer: NodeJS.Timeout | undefined
      const closed = await Promise.race([
        app.close().then(() => true),
        new Promise<false>(resolve => { timer = setTimeout(resolve, 15_000, false) }),
      ]).finally(() => clearTimeout(timer))
      if (!closed) process.stderr.write(`the stories260k server did not close within 15 s; open: ${JSON.stringify(process.getActiveResourcesInfo())}\n`)
    })
  }
  const deadline = Date.now() + 60_000
  while ((await app.inject({ url: '/readyz' })).statusCode !== 200) {
    if (Date.now() > deadline) throw new Error('the model did not become ready')
    await new Promise(resolve => setTimeout(resolve, 20))
  }
  return { app, url: `http://127.0.0.1:${(app.server.address() as AddressInfo).port}` }
}
