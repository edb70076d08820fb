// Bounded admission per model (TGI's try-acquire semaphore): at most
// QUEUE_SIZE chat completions per model may be in progress, generating or
// waiting for the engine. One more is refused at once with 503
// server_overloaded and Retry-After, instead of joining an unbounded queue
// whose wait no client would sit through. The permit lives as long as the
// generation, streams included.
//
// `assertRoom` is the same test without taking a permit, made when a request
// arrives, before its limits are checked: shedding load must cost next to
// nothing, and a request refused there has used no limit and writes no usage
// row (a database commit per refusal made the refusals themselves the
// bottleneck under overload). A request that passes it can still be refused
// by `acquire` if the last place went while its limits were checked.

import { ApiError } from '../../errors.ts'

export class Admission {
  readonly #limit: number
  readonly #inFlight = new Map<string, number>()

  constructor (limit: number) {
    this.#limit = limit
  }

  inFlight (model: string): number {
    return this.#inFlight.get(model) ?? 0
  }

  /** Throws server_overloaded when the model has no place left; takes nothing. */
  assertRoom (model: string): void {
    if (this.inFlight(model) >= this.#limit) {
      throw new ApiError('server_overloaded', `The model '${model}' is at capacity (${this.#limit} requests in progress); retry shortly.`, { headers: { 'retry-after': '1' } })
    }
  }

  /** Takes a permit or throws server_overloaded; the returned function gives it back (idempotent). */
  acquire (model: string): () => void {
    this.assertRoom(model)
    this.#inFlight.set(model, this.inFlight(model) + 1)
    let released = false
    return () => {
      if (released) return
      released = true
      this.#inFlight.set(model, this.inFlight(model) - 1)
    }
  }
}
