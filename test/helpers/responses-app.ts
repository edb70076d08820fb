// For the Responses API tests: an app like buildTestApp's with a response store
// the test holds (in memory, the port's contract), a backend that plays a
// script of events per generation (tool calls, thinking, finish reasons), and
// a reader of the typed event stream.

import { join } from 'node:path'
import type { Test } from 'tap'
import type { FastifyInstance } from 'fastify'
import { Accounts, type Account } from '../../src/accounts/accounts.ts'
import { Tiers } from '../../src/accounts/tiers.ts'
import { UsageRecords } from '../../src/accounts/usage-records.ts'
import type { ResponseStorePort, StoredResponseRecord } from '../../src/api/responses/store-port.ts'
import { buildApp } from '../../src/app.ts'
import { Metrics } from '../../src/api/metrics/metrics.ts'
import { loadConfig } from '../../src/config.ts'
import type { Backend, BackendState, GenerateEvent, GenerateRequest } from '../../src/engine/backend.ts'
import { ModelRegistry } from '../../src/engine/registry.ts'
import { Limiter } from '../../src/limits/limiter.ts'
import { MemoryLimitStore } from '../../src/limits/memory-store.ts'
import { openMigratedDatabase, type Db } from '../../src/store/database.ts'

/** The store's contract in memory: per account, a chain walked from the newest response back. */
export class MemoryResponseStore implements ResponseStorePort {
  readonly records = new Map<string, StoredResponseRecord>()

  async save (record: StoredResponseRecord): Promise<void> {
    this.records.set(record.id, structuredClone(record))
  }

  async chain (accountId: number, id: string): Promise<Array<Record<string, unknown>> | undefined> {
    const turns: StoredResponseRecord[] = []
    for (let at: string | null = id; at !== null;) {
      const record = this.records.get(at)
      if (record === undefined || record.accountId !== accountId) return undefined
      turns.unshift(record)
      at = record.previousResponseId
    }
    return turns.flatMap(turn => [...turn.input, ...(turn.response.output as Array<Record<string, unknown>>)])
  }
}

/** Plays one script of events per generation, in order (the last one again when they run out). */
export class ScriptBackend implements Backend {
  readonly id: string
  readonly contextLength = 4096
  readonly requests: GenerateRequest[] = []
  readonly #scripts: GenerateEvent[][]

  constructor (scripts: GenerateEvent[][], id = 'scripted') {
    this.#scripts = scripts
    this.id = id
  }

  state (): BackendState {
    return { state: 'ready' }
  }

  async load (): Promise<void> {}
  async close (): Promise<void> {}

  async * generate (request: GenerateRequest): AsyncIterable<GenerateEvent> {
    this.requests.push(structuredClone(request))
    const script = this.#scripts[Math.min(this.requests.length - 1, this.#scripts.length - 1)]
    for (const event of script) yield structuredClone(event)
  }
}

export const usage = (prompt: number, completion: number, more: { cached?: number; reasoning?: number } = {}) => ({
  prompt_tokens: prompt,
  completion_tokens: completion,
  total_tokens: prompt + completion,
  ...(more.cached !== undefined ? { prompt_tokens_details: { cached_tokens: more.cached } } : {}),
  ...(more.reasoning !== undefined ? { completion_tokens_details: { reasoning_tokens: more.reasoning } } : {}),
})

export interface ResponsesApp {
  app: FastifyInstance
  db: Db
  accounts: Accounts
  account: Account
  auth: { authorization: string }
  store: MemoryResponseStore
  /** Authorization for a key of a second account. */
  otherAuth: () => Promise<{ authorization: string }>
}

/** `tiers`: a tiers file's JSON text (the shipped tiers.json when absent), as buildTestApp takes it. */
export async function buildResponsesApp (t: Test, opts: { backends: Backend[]; env?: Record<string, string>; store?: MemoryResponseStore | null; tiers?: string }): Promise<ResponsesApp> {
  const dir = t.testdir()
  const config = loadConfig({ DATABASE_URL: `sqlite://${join(dir, 'chatd.db')}`, LOG_LEVEL: 'silent', REFUSED_PER_KEY_PER_MINUTE: '0', REFUSED_PER_ADDRESS_PER_MINUTE: '0', ...opts.env })
  const db = await openMigratedDatabase(config.database)
  const accounts = new Accounts(db)
  const account = await accounts.create({ email: 'user@example.com', tier: 'unlimited' })
  const { key } = await accounts.createKey(account.id, { name: 'test' })
  const models = new ModelRegistry(opts.backends.map(b => ({ id: b.id, backend: b })))
  const usageRecords = new UsageRecords(db)
  const limiter = new Limiter({ tiers: opts.tiers === undefined ? Tiers.fromFile(config.tiersFile) : Tiers.parse(opts.tiers), store: new MemoryLimitStore(), usage: usageRecords })
  const store = opts.store === null ? undefined : opts.store ?? new MemoryResponseStore()
  const app = await buildApp({ config, accounts, models, metrics: new Metrics(), limiter, logger: false, responseStore: store })
  t.teardown(async () => {
    await app.close()
    await db.destroy()
  })
  return {
    app,
    db,
    accounts,
    account,
    auth: { authorization: `Bearer ${key}` },
    store: store ?? new MemoryResponseStore(),
    otherAuth: async () => {
      const other = await accounts.create({ email: `other${Math.random()}@example.com`, tier: 'unlimited' })
      return { authorization: `Bearer ${(await accounts.createKey(other.id, { name: 'other' })).key}` }
    },
  }
}

export interface SseEvent {
  event: string
  data: Record<string, unknown> & { type: string; sequence_number: number }
}

/** The named events of a text/event-stream body, in order. */
export function parseEvents (body: string): SseEvent[] {
  return body.split('\n\n').filter(frame => frame.startsWith('event: ')).map(frame => {
    const [eventLine, dataLine] = frame.split('\n')
    return { event: eventLine.slice('event: '.length), data: JSON.parse(dataLine.slice('data: '.length)) }
  })
}
