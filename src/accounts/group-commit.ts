// Writes that arrive together share one transaction. chatd writes a usage row
// at the end of every request, and on SQLite each commit (synchronous=FULL)
// waits for an fsync on the main thread, since node:sqlite is synchronous:
// about 10 ms on the CI disk. One commit per row kept the event loop blocked
// for over half of every second under load (3.3 s of a 6 s run with 40
// concurrent clients), and every stream's tokens waited behind it. Rows queued
// during one turn of the event loop now go out as one INSERT and one commit;
// while a commit blocks, the next rows pile up, so batches grow with the load.
//
// Each caller still gets its own row's outcome, and only once the row is
// committed (a reply's usage row is written before its last byte).

interface Waiting<T> {
  item: T
  resolve: () => void
  reject: (err: unknown) => void
}

export interface GroupCommitOptions<T> {
  /** Writes several items in one statement (one transaction). */
  writeMany: (items: T[]) => Promise<void>
  /** Writes one item; also used to find which item of a failed batch was at fault. */
  writeOne: (item: T) => Promise<void>
  /**
   * Whether a failed batch's error belongs to the batch as a whole (the
   * database is down: every row gets it) rather than possibly to one row
   * (then each row is tried on its own, so one bad row fails alone).
   */
  sharedFailure: (err: unknown) => boolean
  /** Most items per statement (SQLite binds at most 32766 parameters). */
  maxBatch?: number
}

export class GroupCommit<T> {
  readonly #opts: GroupCommitOptions<T>
  readonly #maxBatch: number
  #queue: Array<Waiting<T>> = []
  #scheduled = false

  constructor (opts: GroupCommitOptions<T>) {
    this.#opts = opts
    this.#maxBatch = opts.maxBatch ?? 500
  }

  /** Resolves once `item` is committed; rejects with its own write's error. */
  add (item: T): Promise<void> {
    return new Promise((resolve, reject) => {
      this.#queue.push({ item, resolve, reject })
      if (!this.#scheduled) {
        this.#scheduled = true
        setImmediate(() => { void this.#flush() })
      }
    })
  }

  async #flush (): Promise<void> {
    this.#scheduled = false
    const taken = this.#queue
    this.#queue = []
    for (let i = 0; i < taken.length; i += this.#maxBatch) await this.#write(taken.slice(i, i + this.#maxBatch))
  }

  async #write (batch: Array<Waiting<T>>): Promise<void> {
    if (batch.length === 1) {
      await this.#writeAlone(batch[0])
      return
    }
    try {
      await this.#opts.writeMany(batch.map(w => w.item))
    } catch (err) {
      if (this.#opts.sharedFailure(err)) for (const w of batch) w.reject(err)
      else await Promise.all(batch.map(w => this.#writeAlone(w)))
      return
    }
    for (const w of batch) w.resolve()
  }

  async #writeAlone (waiting: Waiting<T>): Promise<void> {
    try {
      await this.#opts.writeOne(waiting.item)
      waiting.resolve()
    } catch (err) {
      waiting.reject(err)
    }
  }
}
