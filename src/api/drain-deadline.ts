// Draining has a deadline. When the app closes (SIGTERM), it stops taking
// requests and lets the ones in flight finish, streams included (app.ts,
// step 3). Those still running SHUTDOWN_GRACE_MS later are stopped here: their
// generation is cancelled and their reply ends properly (a stream with an
// error event, a waiting non-streamed request with 503 and Retry-After), so
// every client learns why and the process exits by itself, instead of being
// killed with its sockets cut in the middle of a frame.

import { setMaxListeners } from 'node:events'
import { ApiError } from '../errors.ts'

export class DrainDeadline {
  readonly #passed = new AbortController()
  #timer: NodeJS.Timeout | undefined

  constructor () {
    // Every request in flight listens on this one signal; hundreds are normal, not a leak.
    setMaxListeners(0, this.#passed.signal)
  }

  /** Aborts once the grace period after close has run out. */
  get signal (): AbortSignal {
    return this.#passed.signal
  }

  /** Starts the grace period (once). */
  start (graceMs: number): void {
    if (this.#timer !== undefined || this.#passed.signal.aborted) return
    this.#timer = setTimeout(() => this.#passed.abort(), graceMs)
    this.#timer.unref() // the requests it waits for keep the process alive, not the timer
  }

  /** Everything closed in time: the deadline will not fire. */
  cancel (): void {
    clearTimeout(this.#timer)
  }
}

/** What a reply cut by the deadline says. */
export function drainDeadlineError (): ApiError {
  return new ApiError('server_overloaded', 'The server shut down before this reply was finished; retry shortly.', { headers: { 'retry-after': '1' } })
}
