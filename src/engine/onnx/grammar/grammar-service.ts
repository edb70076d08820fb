// Compiling a JSON response_format's grammar, for one model, where a schema
// cannot hurt anyone else. A compile can take seconds (a nested pattern), never
// end (a deep anyOf chain), trap (a deep $ref chain reads out of bounds) or
// grow WebAssembly memory for good, so:
//
// - a request's new schemas (a response_format's, or each tool's of a forced
//   call) are first compiled together by a trial worker of their own, under one
//   time limit for them all, and the worker is terminated afterwards, whatever
//   happened: timed out, trapped, aborted, or the client left (cancelled);
// - only a schema whose trial succeeded is compiled again where it serves: in
//   its scope's (its account's) own serving worker, which holds that scope's
//   grammars and its sequences' matchers (a compiled grammar cannot leave the
//   WebAssembly instance that made it), so a compile there delays only that
//   account's own requests, and it waits until none of them is running (and
//   new ones wait for it before they start), so decode steps shared with
//   other accounts do not wait on it;
// - serving workers are bounded (each holds the vocabulary): a new scope takes
//   over the least recently used one that nothing uses (which lets go of every
//   grammar and matcher of its last scope), or is refused with 503;
// - compiles in flight are bounded per scope (an account) and in all;
// - grammars are cached per scope, so one account's use of a schema is never
//   seen by another (its first use is always a compile);
// - a serving worker is replaced when it crashes, or once it is past its
//   memory bound and holds no matcher.
import { EventEmitter } from 'node:events'
import { MessageChannel, Worker, type MessagePort } from 'node:worker_threads'
import { FormatCompileError, type GrammarCounts } from '../../backend.ts'
import { ApiError } from '../../../errors.ts'
import { grammarKey, type JsonFormat } from './grammar.ts'
import type { FromGrammarWorker, GrammarWorkerData, ToGrammarWorker } from './grammar-protocol.ts'
import type { ModelDtype } from '../model-dir.ts'

export interface GrammarLimits {
  /** How long a trial compile may take (GRAMMAR_COMPILE_TIMEOUT_MS). */
  compileTimeoutMs: number
  /** Compiles in flight per scope (GRAMMAR_COMPILES_PER_ACCOUNT). */
  perScope: number
  /** Compiles in flight for the model (GRAMMAR_COMPILES_MAX). */
  total: number
  /**
   * Memory past which the serving worker is replaced when idle, and a trial is stopped
   * (GRAMMAR_WORKER_MEMORY_MB; mostly WebAssembly memory).
   */
  memoryBytes: number
  /** A trial's own bound, when it should differ (tests); memoryBytes when absent. */
  trialMemoryBytes?: number
  /** Serving workers at once, one per scope (GRAMMAR_WORKERS_MAX). */
  workers: number
}

export const DEFAULT_GRAMMAR_LIMITS: GrammarLimits = { compileTimeoutMs: 5000, perScope: 2, total: 4, memoryBytes: 512 * 2 ** 20, workers: 4 }

/** Cached grammars the service remembers per serving worker; the worker keeps as many. */
const CACHE_SIZE = 64
/** How often a trial's memory is looked at while it compiles. */
const MEMORY_WATCH_MS = 100
/** A serving compile of a schema whose trial passed gets this many times the limit before its worker is replaced. */
const SERVING_BACKSTOP = 4

interface Serving {
  /** The scope (account) whose grammars and matchers it holds (another's once reassigned). */
  scope: string
  worker: Worker
  ready: Promise<void>
  /** Keys compiled there, least recently used first. */
  compiled: Set<string>
  /** Serving compiles in flight, with the requests' indexes of their items (errors name one). */
  pending: Map<number, { resolve: () => void; reject: (err: Error) => void; indexes: number[] }>
  /** Matchers open there. */
  open: number
  /** Compiles for it in flight, and requests that will open or have opened a matcher there (hold()). */
  users: number
  /** Requests that will open or have opened a matcher there (hold()). */
  requests: number
  /** Settles when the serving compile waiting or running there ends; none then. */
  gate: Promise<void> | undefined
  /** Called when a matcher closes or a request ends: a serving compile may be waiting for quiet. */
  changed: Array<() => void>
  /** Past its memory bound: replaced once it holds no matcher. */
  retiring: boolean
  /** It came up: one that fails after this is replaced at once, one that never did is not (it would fail again). */
  started: boolean
}

/** A trial worker: ready once its vocabulary is prepared; `failure` settles when it errs or exits. */
interface Trial {
  worker: Worker
  ready: Promise<void>
  failure: Promise<Error>
  dead: boolean
}

/** Nothing compiles there, and no request uses it: it may be let go. */
const unused = (serving: Serving): boolean => serving.open === 0 && serving.pending.size === 0 && serving.users === 0

/** The client left while its schema's trial ran: the trial was terminated. */
export class CompileCancelled extends Error {}

/** `promise`, or CompileCancelled once `signal` aborts. */
function abortable (promise: Promise<void>, signal: AbortSignal | undefined): Promise<void> {
  if (!signal) return promise
  if (signal.aborted) return Promise.reject(new CompileCancelled('the client left while its response_format was compiling'))
  return new Promise((resolve, reject) => {
    const onAbort = (): void => reject(new CompileCancelled('the client left while its response_format was compiling'))
    signal.addEventListener('abort', onAbort, { once: true })
    promise.then(resolve, reject).finally(() => signal.removeEventListener('abort', onAbort))
  })
}

/**
 * Emits, for a new schema whose trial passed, 'waiting' ({ scope }) while its serving compile waits
 * for the scope's running requests to end, 'serving' when it starts and 'served' when it ends (tests).
 */
export class GrammarService extends EventEmitter {
  readonly #model: { modelDir: string; dtype: ModelDtype }
  readonly #limits: GrammarLimits
  /** Hands the engine the port to the new serving worker. */
  readonly #onPort: (port: MessagePort, scope: string) => void
  /** Serving workers by scope, least recently used first. */
  readonly #serving = new Map<string, Serving>()
  /** A trial worker started ahead for the next new schema. */
  #spare: Trial | undefined
  readonly #inFlight = new Map<string, number>()
  #nextId = 1
  readonly counts: GrammarCounts = { compiles: 0, timedOut: 0, cancelled: 0, failed: 0, busy: 0, inFlight: 0, replaced: 0, workers: 0, retired: 0, reassigned: 0 }
  #closed = false

  constructor (model: { modelDir: string; dtype: ModelDtype }, limits: Partial<GrammarLimits>, onPort: (port: MessagePort, scope: string) => void) {
    super()
    this.#model = model
    this.#limits = { ...DEFAULT_GRAMMAR_LIMITS, ...limits }
    this.#onPort = onPort
  }

  /**
   * Gets the formats' grammars compiled for `scope` in the serving worker: one request's schemas,
   * compiled together under one time limit (GRAMMAR_COMPILE_TIMEOUT_MS for them all) and one
   * compile slot. Throws FormatCompileError (invalid_parameter naming `response_format`, and the
   * index of the format at fault) when a schema cannot be compiled or not within the limits;
   * rate_limit_exceeded or server_overloaded when too many compiles are in flight; and rejects with
   * CompileCancelled when the signal aborts first (the trial is terminated).
   */
  async compile (formats: JsonFormat | JsonFormat[], opts: { scope: string; signal?: AbortSignal }): Promise<void> {
    const all = (Array.isArray(formats) ? formats : [formats]).map((format, index) => ({ index, format, key: grammarKey({ format, scope: opts.scope }) }))
    // While the scope's worker compiles a new schema it answers no steps: the scope's requests wait
    // here, before their sequences start, so none of them holds up a decode step it shares.
    for (let gate = this.#serving.get(opts.scope)?.gate; gate; gate = this.#serving.get(opts.scope)?.gate) {
      await this.#abortable(gate, opts.signal)
    }
    const have = this.#serving.get(opts.scope)
    if (have) this.#touch(have)
    const missing: Array<{ index: number; format: JsonFormat; key: string }> = []
    for (const item of all) {
      if (have?.compiled.has(item.key)) {
        have.compiled.delete(item.key)
        have.compiled.add(item.key)
      } else if (!missing.some(m => m.key === item.key)) {
        missing.push(item)
      }
    }
    if (missing.length === 0) return
    const release = this.#acquire(opts.scope)
    let held: Serving | undefined
    try {
      // Made (or found) first, so a scope with no room is refused before its trial, and the worker
      // prepares its vocabulary while the trial runs; held meanwhile so it is not let go.
      held = this.#servingWorker(opts.scope)
      held.users++
      await this.#trial(missing, opts.signal)
      let serving = this.#serving.get(opts.scope) ?? held // replaced (crashed) meanwhile: its successor
      while (serving.gate) {
        await this.#abortable(serving.gate, opts.signal)
        serving = this.#serving.get(opts.scope) ?? serving
      }
      let open!: () => void
      const gate = serving.gate = new Promise<void>(resolve => { open = resolve })
      try {
        // Not beside the scope's running requests: their rows would wait for masks, and the decode
        // steps they share with other accounts' rows with them.
        this.emit('waiting', { scope: opts.scope })
        await this.#quiet(serving, opts.signal)
        this.emit('serving', { scope: opts.scope })
        try {
          await this.#serve(serving, missing)
        } finally {
          this.emit('served', { scope: opts.scope })
        }
      } finally {
        if (serving.gate === gate) serving.gate = undefined
        open()
      }
    } finally {
      if (held) {
        held.users--
        if (held.retiring && unused(held)) this.#replace(held)
      }
      release()
    }
  }

  /** Settles once the worker holds no matcher and no request of its scope runs (or it was let go). */
  async #quiet (serving: Serving, signal: AbortSignal | undefined): Promise<void> {
    while ((serving.open > 0 || serving.requests > 0) && this.#serving.get(serving.scope) === serving) {
      await this.#abortable(new Promise<void>(resolve => serving.changed.push(resolve)), signal)
    }
  }

  /** Waits for `promise`; the client leaving while it waits is a cancelled compile. */
  async #abortable (promise: Promise<void>, signal: AbortSignal | undefined): Promise<void> {
    try {
      await abortable(promise, signal)
    } catch (err) {
      if (err instanceof CompileCancelled) this.counts.cancelled++
      throw err
    }
  }

  /** Takes a compile slot for `scope`, or refuses. */
  #acquire (scope: string): () => void {
    const mine = this.#inFlight.get(scope) ?? 0
    if (mine >= this.#limits.perScope) {
      this.counts.busy++
      throw new ApiError('rate_limit_exceeded',
        `at most ${this.#limits.perScope} new schemas of an account are compiled at once; retry when one has finished.`,
        { param: 'response_format', headers: { 'retry-after': '1' } })
    }
    if (this.counts.inFlight >= this.#limits.total) {
      this.counts.busy++
      throw new ApiError('server_overloaded',
        `${this.#limits.total} schemas are being compiled already; retry shortly.`,
        { param: 'response_format', headers: { 'retry-after': '1' } })
    }
    this.#inFlight.set(scope, mine + 1)
    this.counts.inFlight++
    let released = false
    return () => {
      if (released) return
      released = true
      this.counts.inFlight--
      const left = (this.#inFlight.get(scope) ?? 1) - 1
      if (left === 0) this.#inFlight.delete(scope)
      else this.#inFlight.set(scope, left)
    }
  }

  /**
   * Compiles the items in a throwaway worker under one time limit for them all; the worker is
   * terminated however it ends. A failure names the item it happened on.
   */
  async #trial (items: Array<{ index: number; format: JsonFormat; key: string }>, signal: AbortSignal | undefined): Promise<void> {
    if (signal?.aborted) throw new CompileCancelled('the client left while its response_format was compiling')
    this.counts.compiles++
    const trial = this.#takeTrial()
    let timer: NodeJS.Timeout | undefined
    let watch: NodeJS.Timeout | undefined
    let onAbort: (() => void) | undefined
    let settled = false
    try {
      await new Promise<void>((resolve, reject) => {
        const fail = (err: Error, counted?: keyof GrammarCounts): void => {
          if (settled) return
          settled = true
          if (counted) this.counts[counted]++
          reject(err)
        }
        onAbort = () => fail(new CompileCancelled('the client left while its response_format was compiling'))
        signal?.addEventListener('abort', onAbort, { once: true })
        let compiling = false
        /** The item being compiled: a time or memory limit names it. */
        let at = items[0].index
        trial.worker.on('message', (message: FromGrammarWorker) => {
          if (message.type === 'compiling') {
            at = items[message.index].index
          } else if (message.type === 'compiled') {
            settled = true
            resolve()
          } else if (message.type === 'failed') {
            fail(new FormatCompileError(message.message, items[message.index].index), 'failed')
          }
        })
        // A trap that escapes, or the instance's abort while compiling: the schema broke the compiler.
        void trial.failure.then(err => {
          if (!compiling) {
            fail(err)
            return
          }
          fail(new FormatCompileError(
            `the JSON schema cannot be used for structured output: the grammar compiler failed on it (${err.message.slice(0, 200)}).`, at), 'failed')
        })
        void trial.ready.then(() => {
          compiling = true
          // Timed from here: the vocabulary's preparation is not the schemas' doing.
          timer = setTimeout(() => {
            fail(new FormatCompileError(
              `the JSON schema${items.length > 1 ? 's of this request' : ''} did not compile within ${this.#limits.compileTimeoutMs} ms (GRAMMAR_COMPILE_TIMEOUT_MS${items.length > 1 ? ', for all of them together' : ''}); simplify ${items.length > 1 ? 'them' : 'it'} (fewer nested alternatives, shorter repetitions${items.length > 1 ? ', fewer tools' : ''}).`, at), 'timedOut')
          }, this.#limits.compileTimeoutMs)
          // WebAssembly memory grows while a schema compiles and never shrinks: a compile past the
          // bound is stopped (the worker's heap statistics answer even while it compiles).
          watch = setInterval(() => {
            const bound = this.#limits.trialMemoryBytes ?? this.#limits.memoryBytes
            trial.worker.getHeapStatistics().then(heap => {
              if (heap.external_memory <= bound) return
              fail(new FormatCompileError(
                `compiling the JSON schema took more than ${Math.round(bound / 2 ** 20)} MiB of memory (GRAMMAR_WORKER_MEMORY_MB); simplify it.`, at), 'failed')
            }, () => {})
          }, MEMORY_WATCH_MS)
          trial.worker.postMessage({ type: 'compile', id: 0, items: items.map(({ key, format }) => ({ key, format })) } satisfies ToGrammarWorker)
        })
      })
    } catch (err) {
      if (err instanceof CompileCancelled) this.counts.cancelled++
      throw err
    } finally {
      clearTimeout(timer)
      clearInterval(watch)
      if (onAbort) signal?.removeEventListener('abort', onAbort)
      void trial.worker.terminate()
    }
  }

  /**
   * A trial worker with its vocabulary prepared: the spare made after the last trial (so a new
   * schema does not wait for a worker to start), or a new one; a new spare is made for the next.
   */
  #takeTrial (): Trial {
    const spare = this.#spare
    const trial = spare && !spare.dead ? spare : this.#spawnTrial()
    if (spare && spare !== trial) void spare.worker.terminate()
    this.#spare = this.#closed ? undefined : this.#spawnTrial()
    return trial
  }

  #spawnTrial (): Trial {
    const worker = this.#spawn('trial')
    const trial: Trial = {
      worker,
      ready: new Promise(resolve => worker.on('message', (message: FromGrammarWorker) => { if (message.type === 'ready') resolve() })),
      failure: new Promise(resolve => {
        worker.once('error', resolve)
        worker.once('exit', code => resolve(new Error(`the grammar trial worker exited (code ${code})`)))
      }),
      dead: false,
    }
    void trial.failure.then(() => { trial.dead = true })
    return trial
  }

  /** Compiles schemas whose trial passed in their scope's serving worker. */
  async #serve (serving: Serving, items: Array<{ index: number; format: JsonFormat; key: string }>): Promise<void> {
    await serving.ready
    if (this.#serving.get(serving.scope) !== serving) throw new Error('the grammar worker stopped before it was ready')
    const id = this.#nextId++
    let timer: NodeJS.Timeout | undefined
    try {
      await new Promise<void>((resolve, reject) => {
        serving.pending.set(id, { resolve, reject, indexes: items.map(item => item.index) })
        serving.worker.postMessage({ type: 'compile', id, items: items.map(({ key, format }) => ({ key, format })) } satisfies ToGrammarWorker)
        // Past the backstop the serving worker is stuck: replaced, and its scope's requests fail.
        timer = setTimeout(() => this.#replace(serving, new Error('the grammar worker did not finish a compile its trial finished')),
          this.#limits.compileTimeoutMs * SERVING_BACKSTOP)
      })
    } finally {
      clearTimeout(timer)
    }
    for (const { key } of items) serving.compiled.add(key)
    while (serving.compiled.size > CACHE_SIZE) serving.compiled.delete(serving.compiled.values().next().value as string)
  }

  /**
   * The scope's serving worker, made if need be: past the bound, the least recently used worker
   * that nothing uses is let go first; when none can go, 503.
   */
  #servingWorker (scope: string): Serving {
    const have = this.#serving.get(scope)
    if (have) return have
    if (this.#serving.size >= this.#limits.workers) {
      // In order of use, least recent first; one with no matcher left before one whose matchers
      // outlive their requests (a close still on its way, a cancelled sequence not yet stopped:
      // replies nobody reads any more). A request holds its worker until it ends (hold()).
      const free = [...this.#serving.values()].filter(serving => serving.users === 0 && serving.pending.size === 0)
      const idle = free.find(serving => serving.open === 0) ?? free[0]
      if (!idle) {
        this.counts.busy++
        throw new ApiError('server_overloaded',
          `all ${this.#limits.workers} grammar workers (GRAMMAR_WORKERS_MAX) serve running requests of other accounts; retry shortly.`,
          { param: 'response_format', headers: { 'retry-after': '1' } })
      }
      if (!idle.retiring && idle.started) return this.#reassign(idle, scope)
      this.#retire(idle)
    }
    return this.#start(scope)
  }

  /**
   * Hands a worker no request uses to another scope instead of starting a thread and preparing the
   * vocabulary again (with more accounts than workers, every request would): it lets go of every
   * grammar and matcher it held, and answers the new scope's steps over a new port. The old
   * scope's port closes, so a request of it that skipped its compile finds no worker.
   */
  #reassign (serving: Serving, scope: string): Serving {
    this.#serving.delete(serving.scope)
    const channel = new MessageChannel()
    serving.worker.postMessage({ type: 'rescope', port: channel.port1 } satisfies ToGrammarWorker, [channel.port1])
    serving.scope = scope
    serving.compiled.clear()
    serving.open = 0
    this.#serving.set(scope, serving)
    this.counts.reassigned++
    // Before any compile for the new scope resolves, as in #start.
    this.#onPort(channel.port2, scope)
    return serving
  }

  #start (scope: string): Serving {
    const channel = new MessageChannel()
    const worker = this.#spawn('serving', channel.port1)
    let ready!: () => void
    const serving: Serving = {
      scope,
      worker,
      ready: new Promise<void>(resolve => { ready = resolve }),
      compiled: new Set(),
      pending: new Map(),
      open: 0,
      users: 0,
      requests: 0,
      gate: undefined,
      changed: [],
      retiring: false,
      started: false,
    }
    this.#serving.set(scope, serving)
    worker.on('message', (message: FromGrammarWorker) => {
      if (message.type === 'ready') {
        serving.started = true
        ready()
        return
      }
      if (message.type === 'matchers') {
        serving.open = message.open
        for (const call of serving.changed.splice(0)) call()
      }
      if (message.type === 'failed') {
        // A schema its trial took failed here (or broke the serving instance: replaced); a 400.
        const pending = serving.pending.get(message.id)
        serving.pending.delete(message.id)
        pending?.reject(new FormatCompileError(message.message, pending.indexes[message.index] ?? 0))
        if (message.broken) {
          this.#replace(serving, new Error('the grammar worker broke'))
          return
        }
      }
      if (message.type === 'compiled') {
        const pending = serving.pending.get(message.id)
        serving.pending.delete(message.id)
        pending?.resolve()
      }
      if ((message.type === 'compiled' || message.type === 'matchers') && message.memoryBytes > this.#limits.memoryBytes) serving.retiring = true
      if (serving.retiring && unused(serving)) this.#replace(serving)
    })
    const failed = (err: Error): void => {
      this.#replace(serving, err)
      ready() // a compile waiting for it goes on to find no pending entry and fails below
    }
    worker.on('error', failed)
    worker.on('exit', code => failed(new Error(`the grammar worker exited (code ${code})`)))
    this.counts.workers = this.#serving.size
    // Sent before any compile resolves, so the engine has the port before a request that needs it.
    this.#onPort(channel.port2, scope)
    return serving
  }

  /** Marks the scope's worker as used now (least recently used workers are let go first). */
  #touch (serving: Serving): void {
    this.#serving.delete(serving.scope)
    this.#serving.set(serving.scope, serving)
  }

  /**
   * Holds the scope's worker while a request uses its grammar (from before its sequence opens a
   * matcher there until it has ended), so the worker is not let go in between.
   */
  hold (scope: string): () => void {
    const serving = this.#serving.get(scope)
    if (!serving) return () => {}
    serving.users++
    serving.requests++
    let released = false
    return () => {
      if (released) return
      released = true
      serving.users--
      serving.requests--
      for (const call of serving.changed.splice(0)) call()
      if (serving.retiring && unused(serving)) this.#replace(serving)
    }
  }

  /** Lets a worker nothing uses go, to make room for another scope's; its port closes. */
  #retire (serving: Serving): void {
    if (this.#serving.get(serving.scope) !== serving) return
    this.#serving.delete(serving.scope)
    this.counts.retired++
    this.counts.workers = this.#serving.size
    serving.worker.removeAllListeners('exit')
    void serving.worker.terminate()
    for (const call of serving.changed.splice(0)) call() // a serving compile waiting for quiet finds it gone
  }

  /** Lets a serving worker go: its pending compiles fail with `err`; its scope gets a new one. */
  #replace (serving: Serving, err?: Error): void {
    if (this.#serving.get(serving.scope) !== serving) return
    this.#serving.delete(serving.scope)
    this.counts.replaced++
    this.counts.workers = this.#serving.size
    for (const pending of serving.pending.values()) pending.reject(err ?? new Error('the grammar worker was replaced'))
    serving.pending.clear()
    serving.worker.removeAllListeners('exit')
    void serving.worker.terminate()
    for (const call of serving.changed.splice(0)) call() // a serving compile waiting for quiet finds it gone
    // The engine gets the new worker's port at once, so the scope's sequences opening after this go
    // there; one that never came up is made again by the next compile, not in a loop.
    if (!this.#closed && serving.started) this.#start(serving.scope)
  }

  #spawn (role: GrammarWorkerData['role'], port?: MessagePort): Worker {
    const workerData: GrammarWorkerData = { modelDir: this.#model.modelDir, dtype: this.#model.dtype, role, port }
    const worker = new Worker(new URL('./grammar-worker.ts', import.meta.url), { workerData, transferList: port ? [port] : [] })
    worker.unref()
    return worker
  }

  async close (): Promise<void> {
    this.#closed = true
    if (this.#spare) await this.#spare.worker.terminate()
    this.#spare = undefined
    const servings = [...this.#serving.values()]
    this.#serving.clear()
    this.counts.workers = 0
    await Promise.all(servings.map(serving => {
      serving.worker.removeAllListeners('exit')
      return serving.worker.terminate()
    }))
  }
}
