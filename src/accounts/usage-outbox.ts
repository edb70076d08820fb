// Usage rows that could not be written because the database was unavailable
// (restarting, unreachable): kept in memory and written again, oldest first,
// with a growing pause between tries, until the database takes them. The
// response they bill has already been sent, so dropping the row would let that
// call go unrecorded (and out of the allowance's count after a restart).
//
// The rows live only in this process: a crash while the database is still
// down loses them, and shutdown waits a bounded time for them (drain) and
// hands back what is left so it can be logged in full.

import type { NewUsageRecordRow } from '../store/schema.ts'
import { isDatabaseUnavailable } from '../store/unavailable.ts'

export interface OutboxOptions {
  /** First pause before a retry; doubles per failed try up to maxRetryMs. */
  retryMs?: number
  maxRetryMs?: number
  /** The most rows kept; beyond it, the oldest is given up (onGiveUp) rather than memory growing without end. */
  maxRows?: number
  /** A row that will never be written: the queue was full, or the database refused it for good (not an outage). */
  onGiveUp?: (row: NewUsageRecordRow, reason: unknown) => void
}

export class UsageOutbox {
  readonly #write: (row: NewUsageRecordRow) => Promise<void>
  readonly #rows: NewUsageRecordRow[] = []
  readonly #retryMs: number
  readonly #maxRetryMs: number
  readonly #maxRows: number
  readonly #onGiveUp: (row: NewUsageRecordRow, reason: unknown) => void
  #pauseMs: number
  #timer: NodeJS.Timeout | undefined
  #flushing: Promise<void> | undefined

  constructor (write: (row: NewUsageRecordRow) => Promise<void>, opts: OutboxOptions = {}) {
    this.#write = write
    this.#retryMs = opts.retryMs ?? 250
    this.#maxRetryMs = opts.maxRetryMs ?? 5000
    this.#maxRows = opts.maxRows ?? 100_000
    this.#onGiveUp = opts.onGiveUp ?? (() => {})
    this.#pauseMs = this.#retryMs
  }

  /** Rows waiting for the database. */
  get size (): number {
    return this.#rows.length
  }

  add (row: NewUsageRecordRow): void {
    this.#rows.push(row)
    if (this.#rows.length > this.#maxRows) this.#onGiveUp(this.#rows.shift()!, new Error('usage outbox full'))
    this.#schedule()
  }

  #schedule (): void {
    if (this.#timer || this.#flushing || this.#rows.length === 0) return
    this.#timer = setTimeout(() => {
      this.#timer = undefined
      void this.flush()
    }, this.#pauseMs)
    // A retry alone never keeps the process alive; shutdown drains explicitly.
    this.#timer.unref()
  }

  /** Writes queued rows, oldest first, until one fails on an outage; then waits and tries again. */
  flush (): Promise<void> {
    this.#flushing ??= (async () => {
      try {
        while (this.#rows.length > 0) {
          const row = this.#rows[0]
          try {
            await this.#write(row)
          } catch (err) {
            if (isDatabaseUnavailable(err)) {
              this.#pauseMs = Math.min(this.#pauseMs * 2, this.#maxRetryMs)
              return
            }
            this.#onGiveUp(row, err)
          }
          this.#rows.shift()
          this.#pauseMs = this.#retryMs
        }
      } finally {
        this.#flushing = undefined
        this.#schedule()
      }
    })()
    return this.#flushing
  }

  /** Tries to write everything for up to `timeoutMs`; returns the rows still unwritten and stops retrying. */
  async drain (timeoutMs: number): Promise<NewUsageRecordRow[]> {
    const deadline = Date.now() + timeoutMs
    while (this.#rows.length > 0 && Date.now() < deadline) {
      clearTimeout(this.#timer)
      this.#timer = undefined
      await this.flush()
      if (this.#rows.length > 0) await new Promise(resolve => setTimeout(resolve, Math.min(this.#retryMs, Math.max(0, deadline - Date.now()))))
    }
    clearTimeout(this.#timer)
    this.#timer = undefined
    return this.#rows.splice(0)
  }
}
