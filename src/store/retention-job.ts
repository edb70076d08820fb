// Removes rows older than a number of days: shortly after start, then hourly,
// on every replica. Each run deletes in small batches (no long lock, no
// statement that grows with the table) and stops after a time budget; the next
// run goes on from there. Replicas running it together are safe: a delete is
// idempotent, and on PostgreSQL each takes rows the others have not locked.
// What is deleted, and how, is the caller's `deleteBefore`.

import { setImmediate } from 'node:timers/promises'

const DAY_MS = 24 * 3600 * 1000

/** Where a failed run is reported (the app's logger). */
export interface RetentionLog {
  warn (obj: Record<string, unknown>, msg: string): void
}

/** Deletes at most `batch` rows from before `cutoff`; returns how many it deleted. */
export type DeleteBefore = (cutoff: Date, batch: number) => Promise<number>

export interface RetentionOptions {
  /** Days a row is kept; 0: the job does nothing. */
  retentionDays: number
  log?: RetentionLog
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

export class RetentionJob {
  readonly #what: string
  readonly #deleteBefore: DeleteBefore
  readonly #retentionDays: number
  readonly #log: RetentionLog
  readonly #firstRunMs: number
  readonly #intervalMs: number
  readonly #batch: number
  readonly #runBudgetMs: number
  readonly #now: () => Date
  #timer: NodeJS.Timeout | undefined
  #running: Promise<number> | undefined
  #stopped = false

  /** `what`: the rows, as a failed run's log line names them ("stored responses"). */
  constructor (what: string, deleteBefore: DeleteBefore, opts: RetentionOptions) {
    this.#what = what
    this.#deleteBefore = deleteBefore
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
        this.#log.warn({ err: (err as Error).message }, `removing expired ${this.#what} failed; the next run tries again`)
      }).finally(() => {
        if (!this.#stopped) this.#schedule(this.#intervalMs)
      })
    }, ms)
    this.#timer.unref()
  }

  /** One run: deletes expired rows, batch after batch, until a batch is short or the budget is spent; returns how many. */
  runOnce (): Promise<number> {
    this.#running ??= (async () => {
      try {
        if (this.#retentionDays === 0) return 0
        const cutoff = new Date(this.#now().getTime() - this.#retentionDays * DAY_MS)
        const deadline = Date.now() + this.#runBudgetMs
        let total = 0
        while (!this.#stopped) {
          const deleted = await this.#deleteBefore(cutoff, this.#batch)
          total += deleted
          if (deleted < this.#batch || Date.now() >= deadline) break
          // SQLite answers on this thread, so a run of batches would hold every request until its
          // end (a run of 800 batches, 0.8 s, let no timer fire): each batch waits its turn instead.
          await setImmediate()
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
