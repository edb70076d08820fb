// An in-test Backend that streams words it was given. For validation, auth and
// SSE-framing tests only; everything about real generation is tested against
// the real ONNX engine on stories260k.

import { setTimeout as sleep } from 'node:timers/promises'
import type { Backend, BackendState, GenerateEvent, GenerateRequest } from '../../src/engine/backend.ts'
import type { ApiError } from '../../src/errors.ts'

export interface ScriptedOptions {
  id?: string
  /** Streamed one per delta; content deltas. */
  words?: string[]
  /** Reasoning deltas streamed before the words. */
  thinking?: string[]
  /** Pause before each delta. */
  delayMs?: number
  /** Pause before the first event (queue or prompt time). */
  firstDelayMs?: number
  /** Waited for before the first event, after firstDelayMs: the test decides when the reply may go on. */
  firstGate?: Promise<void>
  /** Thrown before the first event (a refusal such as context_length_exceeded). */
  refuse?: ApiError
  /** Thrown after this many deltas (a mid-stream failure). */
  failAfter?: { deltas: number; error: Error }
  /** load() waits for this promise; the backend is 'loading' until then. */
  loadGate?: Promise<void>
  /** The context window it reports (default 512); null: it reports none, as an upstream without contextLength. */
  contextLength?: number | null
}

export class ScriptedBackend implements Backend {
  readonly id: string
  readonly contextLength: number | undefined
  #state: BackendState = { state: 'loading' }
  readonly #opts: ScriptedOptions
  /** What the last generate() call received. */
  lastRequest?: GenerateRequest
  /** Deltas emitted by the generation that started last. */
  emitted = 0
  /** Set when a generation ended because its signal aborted. */
  cancelled = false
  /** Generations currently running. */
  running = 0
  #generation = 0
  readonly #runningWaiters: Array<{ count: number; resolve: () => void }> = []

  constructor (opts: ScriptedOptions = {}) {
    this.id = opts.id ?? 'scripted'
    this.contextLength = opts.contextLength === null ? undefined : opts.contextLength ?? 512
    this.#opts = opts
    if (!opts.loadGate) this.#state = { state: 'ready' }
  }

  state (): BackendState {
    return this.#state
  }

  /** Resolves once `count` generations run at once: the requests got that far (admitted, metered, shaped). */
  whenRunning (count: number): Promise<void> {
    if (this.running >= count) return Promise.resolve()
    return new Promise(resolve => this.#runningWaiters.push({ count, resolve }))
  }

  async load (): Promise<void> {
    await this.#opts.loadGate
    this.#state = { state: 'ready' }
  }

  async * generate (request: GenerateRequest, signal: AbortSignal): AsyncIterable<GenerateEvent> {
    this.lastRequest = request
    this.emitted = 0
    // Counted per generation: replies running at once each report their own.
    let emitted = 0
    const generation = ++this.#generation
    this.cancelled = false
    if (this.#opts.refuse) throw this.#opts.refuse
    this.running++
    for (const waiter of this.#runningWaiters.filter(w => w.count <= this.running)) {
      this.#runningWaiters.splice(this.#runningWaiters.indexOf(waiter), 1)
      waiter.resolve()
    }
    try {
      const promptTokens = request.messages.reduce((n, m) => n + m.content.split(/\s+/).filter(Boolean).length, 0)
      const pieces = [
        ...(this.#opts.thinking ?? []).map(text => ({ reasoning: text })),
        ...(this.#opts.words ?? ['Once', ' upon', ' a', ' time']).map(text => ({ content: text })),
      ]
      if (this.#opts.firstDelayMs) await sleep(this.#opts.firstDelayMs, undefined, { signal }).catch(() => {})
      if (this.#opts.firstGate) await this.#opts.firstGate
      let reason: 'stop' | 'length' | 'cancelled' = 'stop'
      for (const piece of pieces) {
        if (this.#opts.delayMs) await sleep(this.#opts.delayMs, undefined, { signal }).catch(() => {})
        if (signal.aborted) {
          reason = 'cancelled'
          break
        }
        if (request.maxTokens !== undefined && emitted >= request.maxTokens) {
          reason = 'length'
          break
        }
        if (this.#opts.failAfter && emitted >= this.#opts.failAfter.deltas) throw this.#opts.failAfter.error
        emitted++
        if (this.#generation === generation) this.emitted = emitted
        yield { type: 'delta', ...piece }
      }
      if (signal.aborted) reason = 'cancelled'
      this.cancelled = reason === 'cancelled'
      yield { type: 'finish', reason, usage: { prompt_tokens: promptTokens, completion_tokens: emitted, total_tokens: promptTokens + emitted } }
    } finally {
      this.running--
    }
  }

  async close (): Promise<void> {}
}
