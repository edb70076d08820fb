// The engine's side of the grammars: each constrained sequence's matcher lives
// in its scope's (its account's) serving grammar worker (grammar-service.ts),
// reached over that worker's port. One round trip per step: accepting a sampled token sends it and asks
// for the next mask at once, so the worker computes it while the engine runs
// the next step's graph, and prepare() awaits it; apply() and accept() work on
// the mask here, so sampling itself never waits on the worker.
import type { MessagePort } from 'node:worker_threads'
import { applyTokenMask, grammarKey, maskAllows, type Constraint, type JsonFormat } from './grammar.ts'
import type { FromMatcher, ToMatcher } from './grammar-protocol.ts'

interface Pending {
  resolve: (mask: Int32Array) => void
  reject: (err: Error) => void
  message: ToMatcher & { type: 'step' }
  /** An opening step sent again to a new worker: the constraint's matcher lives there now. */
  moved: (generation: number) => void
}

/** How long an opening step waits for a new worker once its worker's port closed. */
const REOPEN_GRACE_MS = 2000

/**
 * The ports to the scopes' serving grammar workers (one per account, grammar-service.ts): a
 * sequence's steps go to its own scope's worker, so one scope's compile never holds up another's.
 */
export class GrammarClient {
  readonly #channels = new Map<string, GrammarChannel>()
  #nextSeq = 1

  /** Takes the port to `scope`'s (new) serving worker. */
  setPort (port: MessagePort, scope = ''): void {
    let channel = this.#channels.get(scope)
    if (!channel) {
      channel = new GrammarChannel(() => { if (this.#channels.get(scope) === channel) this.#channels.delete(scope) })
      this.#channels.set(scope, channel)
    }
    channel.setPort(port)
  }

  /** A constraint for one sequence of `scope`; its matcher opens on its first step, in that scope's worker. */
  constraint (format: JsonFormat, scope: string): Constraint {
    let channel = this.#channels.get(scope)
    if (!channel) {
      // No worker for the scope (let go before this sequence started): its steps fail.
      channel = new GrammarChannel(() => {})
    }
    return new RemoteConstraint(channel, this.#nextSeq++, grammarKey({ format, scope }), format)
  }
}

/** The port to one scope's serving grammar worker and the steps waiting on it. */
class GrammarChannel {
  #port: MessagePort | undefined
  /** Bumped with each new port: constraints opened on an older one have lost their matcher. */
  #generation = 0
  readonly #pending = new Map<number, Pending>()
  #grace: NodeJS.Timeout | undefined
  /** Called once its worker is gone for good (let go, no new port within the grace). */
  readonly #gone: () => void

  constructor (gone: () => void) {
    this.#gone = gone
  }

  /**
   * Takes the port to a (new) serving worker. Steps waiting on the old one fail, except a
   * sequence's first (its matcher not made yet: a worker replaced while idle may not have read
   * it), which is sent again to the new one.
   */
  setPort (port: MessagePort): void {
    clearTimeout(this.#grace)
    this.#failAll(new Error('the grammar worker was replaced'), true)
    this.#port?.close()
    this.#port = port
    this.#generation++
    for (const pending of this.#pending.values()) {
      pending.moved(this.#generation)
      port.postMessage(pending.message)
    }
    port.on('message', (message: FromMatcher) => {
      const pending = this.#pending.get(message.seq)
      this.#pending.delete(message.seq)
      if (message.type === 'mask') pending?.resolve(message.mask)
      else pending?.reject(new Error(`grammar: ${message.message}`))
    })
    port.on('close', () => {
      if (this.#port !== port) return
      this.#port = undefined
      this.#failAll(new Error('the grammar worker stopped'), true)
      // First steps wait a moment for the new worker's port, then fail too.
      this.#grace = setTimeout(() => {
        this.#failAll(new Error('the grammar worker stopped'), false)
        this.#gone()
      }, REOPEN_GRACE_MS)
      this.#grace.unref()
    })
    port.unref() // the engine's thread ends when the engine does, not when the port does
  }

  get generation (): number {
    return this.#generation
  }

  /** Posts a step and resolves with the mask that comes back. */
  step (message: ToMatcher & { type: 'step' }, generation: number, moved: (generation: number) => void): Promise<Int32Array> {
    const port = this.#port
    if (!port || generation !== this.#generation) return Promise.reject(new Error('the grammar worker holding this sequence was replaced'))
    return new Promise((resolve, reject) => {
      this.#pending.set(message.seq, { resolve, reject, message, moved })
      port.postMessage(message)
    })
  }

  close (seq: number, generation: number): void {
    if (generation === this.#generation) this.#port?.postMessage({ type: 'close', seq } satisfies ToMatcher)
  }

  /** Fails the waiting steps; with `keepOpening`, a sequence's first step waits on. */
  #failAll (err: Error, keepOpening: boolean): void {
    for (const [seq, pending] of this.#pending) {
      if (keepOpening && pending.message.open) continue
      pending.reject(err)
      this.#pending.delete(seq)
    }
  }
}

class RemoteConstraint implements Constraint {
  readonly #client: GrammarChannel
  readonly #seq: number
  readonly #key: string
  readonly #format: JsonFormat
  /** The worker that holds the matcher (set on the first step). */
  #generation: number | undefined
  /** Tokens accepted here, sent with the next step. */
  #accepted: number[] = []
  #mask: Int32Array | null = null
  /** The next mask, asked for ahead. */
  #next: Promise<Int32Array> | undefined
  #disposed = false

  constructor (client: GrammarChannel, seq: number, key: string, format: JsonFormat) {
    this.#client = client
    this.#seq = seq
    this.#key = key
    this.#format = format
  }

  /** The next mask: already asked for when the last token was accepted, else asked for now. */
  async prepare (): Promise<void> {
    const next = this.#next ?? this.#ask()
    this.#next = undefined
    this.#mask = await next
  }

  /** Sends the tokens accepted since the last step (opening the matcher on the first) and gets the next mask. */
  #ask (): Promise<Int32Array> {
    const opening = this.#generation === undefined
    this.#generation ??= this.#client.generation
    const tokens = this.#accepted
    this.#accepted = []
    const asked = this.#client.step({
      type: 'step', seq: this.#seq, tokens, ...(opening ? { open: { key: this.#key, format: this.#format } } : {}),
    }, this.#generation, generation => { this.#generation = generation })
    asked.catch(() => {}) // reported by the prepare() that awaits it; a sequence that ended never does
    return asked
  }

  apply (logits: Float32Array, n: number): void {
    if (!this.#mask) throw new Error('a constraint applied before prepare()')
    applyTokenMask(logits, n, this.#mask)
  }

  accept (id: number): boolean {
    const mask = this.#mask
    this.#mask = null
    if (!mask || !maskAllows(mask, id)) return false
    this.#accepted.push(id)
    // Asked for now, so the worker computes it while the engine runs the next step's graph.
    if (!this.#disposed) this.#next = this.#ask()
    return true
  }

  dispose (): void {
    if (this.#disposed) return
    this.#disposed = true
    if (this.#generation !== undefined) this.#client.close(this.#seq, this.#generation)
  }
}
