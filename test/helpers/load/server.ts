// The real server for a load or reliability run, in this process: startServer
// on a free port over a temp SQLite file, the stories260k model (a real 260K
// Llama, fast on CPU), and one account with a key on a tier whose limits are
// counted but never reached, so the run measures the queue and the engine,
// not the rate limits, while the allowance counter still says how many calls
// were admitted. Shared by `npm run load` and the reliability tests.

import fs from 'node:fs'
import type { AddressInfo } from 'node:net'
import os from 'node:os'
import path from 'node:path'
import type { FastifyInstance, FastifyServerOptions } from 'fastify'
import { Accounts } from '../../../src/accounts/accounts.ts'
import { loadConfig } from '../../../src/config.ts'
import { startServer } from '../../../src/server.ts'
import { openMigratedDatabase, type Db } from '../../../src/store/database.ts'
import { storiesModelEntry } from '../models.ts'

export const LOAD_MODEL = 'stories260k'

/** Large enough never to refuse in a run, present so the store keeps the counts. */
const COUNTED_NOT_LIMITING = { requests_per_minute: 1e9, tokens_per_minute: 1e12, calls_per_month: 1e12, max_tokens_per_request: 1e6, models: ['*'] }

export interface LoadServerOptions {
  /** Environment for loadConfig on top of the run's own (QUEUE_SIZE, MAX_BATCH, SSE_KEEPALIVE_MS, ...). */
  env?: Record<string, string>
  /** A model directory to serve instead of stories260k, with its dtype. */
  modelDir?: string
  dtype?: string
  logger?: FastifyServerOptions['logger']
}

export interface LoadServer {
  app: FastifyInstance
  /** http://127.0.0.1:PORT */
  base: string
  key: string
  model: string
  /** The server's database, for reading usage rows. */
  db: Db
  close (): Promise<void>
}

export async function startLoadServer (opts: LoadServerOptions = {}): Promise<LoadServer> {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'chatd-load-'))
  const modelsFile = path.join(dir, 'models.json')
  const tiersFile = path.join(dir, 'tiers.json')
  fs.writeFileSync(modelsFile, JSON.stringify({ models: [storiesModelEntry(LOAD_MODEL, { path: opts.modelDir, dtype: opts.dtype })] }))
  fs.writeFileSync(tiersFile, JSON.stringify({ default: 'load', tiers: { load: COUNTED_NOT_LIMITING } }))
  const config = loadConfig({
    PORT: '0',
    HOST: '127.0.0.1',
    LOG_LEVEL: 'silent',
    DATABASE_URL: `sqlite://${path.join(dir, 'chatd.db')}`,
    MODELS_FILE: modelsFile,
    TIERS_FILE: tiersFile,
    CHATD_AUTO_PULL: '0',
    // Every client of the run connects from 127.0.0.1.
    MAX_CONNECTIONS_PER_ADDRESS: '0',
    ...opts.env,
  })

  // The account exists before the server starts, as one made with `chatd accounts create` would.
  const db = await openMigratedDatabase(config.database)
  const accounts = new Accounts(db)
  const account = await accounts.create({ email: 'load@example.com', tier: 'load' })
  const { key } = await accounts.createKey(account.id, { name: 'load' })

  let app: FastifyInstance
  try {
    app = await startServer(config, { print: () => {}, logger: opts.logger ?? false })
  } catch (err) {
    await db.destroy()
    throw err
  }
  const base = `http://127.0.0.1:${(app.server.address() as AddressInfo).port}`
  const close = async (): Promise<void> => {
    await app.close()
    await db.destroy()
    fs.rmSync(dir, { recursive: true, force: true })
  }
  const deadline = Date.now() + 60_000
  for (let ready = await app.inject({ url: '/readyz' }); ready.statusCode !== 200; ready = await app.inject({ url: '/readyz' })) {
    if (Date.now() > deadline) {
      await close()
      throw new Error(`the model did not become ready within 60 s: ${ready.body}`)
    }
    await new Promise(resolve => setTimeout(resolve, 50))
  }
  return { app, base, key, model: LOAD_MODEL, db, close }
}
