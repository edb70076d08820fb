// A local model whose files are not on disk yet, while `chatd serve` fetches
// them (CHATD_AUTO_PULL). Until the download completes, requests get 503
// model_unavailable with the progress, and readiness waits; then the real
// backend is built and loaded and every call goes to it. When the hub cannot
// be reached the model stays unavailable, and the log (and an admin account's
// message) gives the exact pull command to run by hand.

import type { Backend, BackendState, ChatMessage, DownloadingBackend, EngineStats, DownloadState, GenerateEvent, GenerateRequest, GrammarCounts, ResponseFormat } from '../engine/backend.ts'
import { unavailableError, type UnavailableState } from '../engine/unavailable.ts'
import { lineReporter, PullTracker } from './progress.ts'
import type { PullEvent } from './pull.ts'
import type { ToolCallFormat } from '../engine/tools/format.ts'

export interface PullLog {
  info: (obj: object, msg: string) => void
  error: (obj: object, msg: string) => void
}

export interface PullingBackendOptions {
  id: string
  /** Where the files come from, for messages: "https://huggingface.co/org/repo". */
  source: string
  /** The command that does the same by hand. */
  pullCommand: string
  /** Downloads the files, reporting events; rejects with the reason it could not. */
  pull: (onEvent: (event: PullEvent) => void, signal: AbortSignal) => Promise<void>
  /** Builds the real backend once the files are complete. */
  open: () => Promise<Backend>
}

export type { DownloadState }

export class PullingBackend implements DownloadingBackend {
  readonly id: string
  readonly #opts: PullingBackendOptions
  readonly #tracker = new PullTracker()
  readonly #abort = new AbortController()
  #log?: PullLog
  #failure?: string
  #inner?: Backend
  #running?: Promise<void>
  /** Told of the engine's steps once the model is open (the metrics register before it is). */
  readonly #stepListeners: Array<(tokens: number[]) => void> = []

  constructor (opts: PullingBackendOptions) {
    this.id = opts.id
    this.#opts = opts
  }

  get charsPerToken (): number | undefined {
    return this.#inner?.charsPerToken
  }

  get contextLength (): number | undefined {
    return this.#inner?.contextLength
  }

  get activeSequences (): number | undefined {
    return this.#inner?.activeSequences
  }

  /** The execution provider of the loaded model, once there is one. */
  get device (): string | undefined {
    return this.#inner?.device
  }

  get deviceWhy (): string | undefined {
    return this.#inner?.deviceWhy
  }

  get cacheOnDevice (): boolean | undefined {
    return this.#inner?.cacheOnDevice
  }

  /** The download while it runs or after it failed; undefined once the files are complete. */
  download (): DownloadState | undefined {
    if (this.#failure !== undefined) return { state: 'failed', error: this.#failure, hint: this.#opts.pullCommand }
    if (this.#inner) return undefined
    return { state: 'downloading', ...this.#tracker.status }
  }

  /** Where progress lines go (the server's log); set before load(). */
  attachLog (log: PullLog): void {
    this.#log = log
  }

  state (): BackendState {
    if (this.#inner) return this.#inner.state()
    if (this.#failure !== undefined) {
      return { state: 'unavailable', reason: `its files could not be downloaded: ${this.#failure}`, hint: `run: ${this.#opts.pullCommand}`, summary: 'its files could not be downloaded' }
    }
    const hint = 'it loads by itself when the download completes; GET /readyz shows the progress'
    return {
      state: 'unavailable',
      reason: `its files are being downloaded from ${this.#opts.source}: ${this.#tracker.describe()}`,
      hint,
      summary: `its files are being downloaded: ${this.#tracker.describe()}; ${hint}`,
      // It loads by itself once they are in: clients may come back.
      retryAfterS: 30,
    }
  }

  load (): Promise<void> {
    this.#running ??= this.#run()
    return this.#running
  }

  async #run (): Promise<void> {
    const log = this.#log
    const lines = lineReporter(line => log?.info({ model: this.id }, `pull: ${line}`))
    log?.info({ model: this.id, source: this.#opts.source }, 'model files missing: downloading them (CHATD_AUTO_PULL=0 turns this off)')
    try {
      await this.#opts.pull(event => {
        this.#tracker.onEvent(event)
        lines(event)
      }, this.#abort.signal)
    } catch (err) {
      this.#failure = (err as Error).message
      if (this.#abort.signal.aborted) {
        // Shutting down: what arrived stays as .partial and the next start resumes it.
        log?.info({ model: this.id }, 'model download stopped; it resumes at the next start')
        throw new Error('download stopped', { cause: err })
      }
      log?.error({ model: this.id, error: this.#failure, hint: this.#opts.pullCommand }, `model download failed; to retry by hand run: ${this.#opts.pullCommand}`)
      // No `cause`: the message already holds the failure's whole text, and a logged
      // error's causes are appended to its message (pino), which repeated it.
      throw new Error(`download failed: ${this.#failure}`)
    }
    this.#inner = await this.#opts.open()
    for (const listener of this.#stepListeners) this.#inner.onEngineSteps?.(listener)
    await this.#inner.load()
  }

  async * generate (request: GenerateRequest, signal: AbortSignal): AsyncIterable<GenerateEvent> {
    if (this.#inner) {
      yield * this.#inner.generate(request, signal)
      return
    }
    throw unavailableError(this.id, this.state() as UnavailableState)
  }

  /** Once the files are in, the model's own check (a local engine compiles the grammar); before, generate() refuses anyway. */
  async prepareResponseFormats (formats: ResponseFormat[], opts: { scope: string; signal?: AbortSignal }): Promise<void> {
    await this.#inner?.prepareResponseFormats?.(formats, opts)
  }

  get grammarCounts (): GrammarCounts | undefined {
    return this.#inner?.grammarCounts
  }

  /** The model's own tool format once its files are in. */
  toolCallFormat (): ToolCallFormat | undefined {
    return this.#inner?.toolCallFormat?.()
  }

  get promptTokensComputedAhead (): number | undefined {
    return this.#inner?.promptTokensComputedAhead
  }

  get engineStats (): EngineStats | undefined {
    return this.#inner?.engineStats
  }

  onEngineSteps (listener: (tokens: number[]) => void): void {
    this.#stepListeners.push(listener)
    this.#inner?.onEngineSteps?.(listener)
  }

  /** Passed on once the files are in (the default model is served through this wrapper). */
  prepareNextTurn (messages: ChatMessage[], cacheScope?: string): void {
    this.#inner?.prepareNextTurn?.(messages, cacheScope)
  }

  async close (): Promise<void> {
    this.#abort.abort()
    await this.#running?.catch(() => {})
    await this.#inner?.close()
  }
}
