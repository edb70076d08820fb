// Removes stored responses older than RESPONSES_RETENTION_DAYS: shortly after
// start, then hourly, on every replica. Each run deletes in small batches (no
// long lock, no statement that grows with the table) and stops after a time
// budget; the next run goes on from there. Replicas running it together are
// safe: a delete is idempotent, and on PostgreSQL each takes rows the others
// have not locked.

import type { StoredResponses, StoreLog } from './stored-responses.ts'

const DAY_MS = 24 * 3600 * 1000

export interface RetentionOptions {
  /** RESPONSES_RETENTION_DAYS; 0: the job does nothing. */
  retentionDays: number
  log?: StoreLog
  /** Until the first run (ms): after start, not during it. */
  firstRunMs?: number
  /** Between runs (ms). */
  intervalMs?: number
  /** Rows per delete statement. */
  batch?: number
  /** How long one run may keep deleting (ms). */
  runBudgetMs?: number
  /** The clock that decides what is old (tests move it). */
  now?: () => Date
}

export class ResponseRetention {
  readonly #store: Pick<StoredResponses, 'deleteStoredBefore'>
  readonly #retentionDays: number
  readonly #log: StoreLog
  readonly #firstRunMs: number
  readonly #intervalMs: number
  readonly #batch: number
  readonly #runBudgetMs: number
  readonly #now: () => Date
  #timer: NodeJS.Timeout | undefined
  #running: Promise<number> | undefined
  #stopped = false

  constructor (store: Pick<StoredResponses, 'deleteStoredBefore'>, opts: RetentionOptions) {
    this.#store = store
    this.#retentionDays = opts.retentionDays
    this.#log = opts.log ?? { warn: () => {} }
    this.#firstRunMs = opts.firstRunMs ?? 60_000
    this.#intervalMs = opts.intervalMs ?? 3600_000
    this.#batch = opts.batch ?? 500
    this.#runBudgetMs = opts.runBudgetMs ?? 10_000
    this.#now = opts.now ?? (() => new Date())
  }

  /** Schedules the runs; the timer never keeps the process alive. */
  start (): void {
    if (this.#retentionDays === 0 || this.#timer || this.#stopped) return
    this.#schedule(this.#firstRunMs)
  }

  #schedule (ms: number): void {
    this.#timer = setTimeout(() => {
      void this.runOnce().catch(err => {
        // A database outage, another replica's lock: the next run tries again.
        this.#log.warn({ err: (err as Error).message }, 'removing expired stored responses failed; the next run tries again')
      }).finally(() => {
        if (!this.#stopped) this.#schedule(this.#intervalMs)
      })
    }, ms)
    this.#timer.unref()
  }

  /** One run: deletes expired responses, batch after batch, until none are left or the budget is spent; returns how many. */
  runOnce (): Promise<number> {
    this.#running ??= (async () => {
      try {
        if (this.#retentionDays === 0) return 0
        const cutoff = new Date(this.#now().getTime() - this.#retentionDays * DAY_MS)
        const deadline = Date.now() + this.#runBudgetMs
        let total = 0
        while (!this.#stopped) {
          const deleted = await this.#store.deleteStoredBefore(cutoff, this.#batch)
          total += deleted
          if (deleted < this.#batch || Date.now() >= deadline) break
        }
        return total
      } finally {
        this.#running = undefined
      }
    })()
    return this.#running
  }

  /** Stops scheduling and waits for a run in progress, so the database can close after it. */
  async stop (): Promise<void> {
    this.#stopped = true
    clearTimeout(this.#timer)
    this.#timer = undefined
    await this.#running?.catch(() => {})
  }
}
