// The local ONNX model as a Backend: the main thread's side of the engine
// worker. Requests go to the worker as messages; its events come back into
// one object stream per request, which generate() iterates.
import { randomUUID } from 'node:crypto'
import { Readable } from 'node:stream'
import { Worker } from 'node:worker_threads'
import { jsonFormatOf, type Backend, type BackendState, type ChatMessage, type EngineStats, type GenerateEvent, type GenerateRequest, type GrammarCounts, type ResponseFormat } from '../backend.ts'
import { ApiError } from '../../errors.ts'
import { pullCommand } from '../models-file.ts'
import { unavailableError } from '../unavailable.ts'
import { DEFAULT_DTYPE, MODEL_DTYPES, ModelDirError, readModelDir, type ModelDtype } from './model-dir.ts'
import { DEVICE_CHOICES, type Device, type DeviceChoice } from './device/providers.ts'
import { GrammarService, type GrammarLimits } from './grammar/grammar-service.ts'
import type { JsonFormat } from './grammar/grammar.ts'
import type { FromWorker, ToWorker, WorkerSettings } from './protocol.ts'
import type { EngineSettings } from './scheduler/engine.ts'
import { TOOL_FORMATS, type ToolCallFormat } from '../tools/format.ts'
import { readToolCalls } from '../tools/prompting.ts'

/** The engine's tuning, as models.json and the settings give it (defaults are the engine's; see EngineSettings). */
type EngineTuning = Pick<EngineSettings, 'deviceFrom' | 'maxBatch' | 'prefillChunk' | 'contextLength' | 'kvCacheBytes' | 'prefixCache' | 'prefixCacheBytes' | 'sharedPrefix' | 'mixedBatches' | 'promptGraph' | 'webgpuCapture' | 'webgpuCaptureRows'>

export interface OnnxBackendOptions extends EngineTuning {
  id: string
  path: string
  /** Checked here: a models.json value, not yet a ModelDtype. */
  dtype?: string
  /** Checked here: 'auto', 'cpu', 'cuda' or 'webgpu'. */
  device?: string
  /** onnxruntime threads; 0 or absent: onnxruntime's choice. */
  threads?: number
  /** GRAMMAR_COMPILE_TIMEOUT_MS, GRAMMAR_COMPILES_PER_ACCOUNT, GRAMMAR_COMPILES_MAX, GRAMMAR_WORKER_MEMORY_MB, GRAMMAR_WORKERS_MAX. */
  grammar?: Partial<GrammarLimits>
}

export function createOnnxBackend (opts: OnnxBackendOptions): Backend {
  return new OnnxBackend(opts)
}

export class OnnxBackend implements Backend {
  readonly id: string
  contextLength?: number
  charsPerToken?: number
  /** The execution provider in use once loaded. */
  device?: Device
  /** Why the engine runs on that device (asked for by name, or what `auto` found), once loaded. */
  deviceWhy?: string
  /** Whether the KV cache stays in the device's memory between steps (WebGPU with a concat graph), once loaded. */
  cacheOnDevice?: boolean
  /** Whether prompts run on the model's int8 prompt graph, once loaded. */
  promptGraph?: boolean
  /** Positions a row of the capture step holds (ONNX_WEBGPU_CAPTURE), once loaded; 0: none. */
  capturePositions?: number
  /** Rows the capture step takes (ONNX_WEBGPU_CAPTURE_ROWS, within MAX_BATCH), once loaded; 0: none. */
  captureRows?: number
  /** Prompt positions the engine computed ahead for conversations' next turns, since start. */
  promptTokensComputedAhead = 0
  /** The engine's latest report of its counts and load (metrics). */
  engineStats?: EngineStats
  /** Told the tokens of each engine step as reports arrive. */
  readonly #stepListeners: Array<(tokens: number[]) => void> = []
  /** How the model writes tool calls (its template's family), once loaded. */
  #toolFormat?: ToolCallFormat
  readonly #settings: WorkerSettings
  #current: BackendState = { state: 'loading' }
  #worker: Worker | null = null
  #loading: Promise<void> | null = null
  /** Open requests by id: the worker's events for each are pushed here. */
  readonly #streams = new Map<string, Readable>()
  /**
   * Requests the worker has been given and has not yet finished or failed. A
   * consumer that stops reading leaves `streams` at once, but its sequence
   * runs until the worker sees the cancel; this set says when it has stopped.
   */
  readonly #inEngine = new Set<string>()
  /** JSON response_format grammars, compiled and matched in workers of their own. */
  readonly #grammars: GrammarService

  constructor (opts: OnnxBackendOptions) {
    this.id = opts.id
    const dtype = (opts.dtype ?? DEFAULT_DTYPE) as ModelDtype
    if (!MODEL_DTYPES.includes(dtype)) throw new Error(`model ${opts.id}: dtype ${JSON.stringify(opts.dtype)} is not one of ${MODEL_DTYPES.join(', ')}`)
    const device = (opts.device ?? 'auto') as DeviceChoice
    if (!DEVICE_CHOICES.includes(device)) throw new Error(`model ${opts.id}: device ${JSON.stringify(opts.device)} is not one of ${DEVICE_CHOICES.join(', ')}`)
    // The rest of the options is the engine's tuning, passed on as given (the engine has the defaults).
    const { id: _id, path, dtype: _dtype, device: _device, threads, grammar: _grammar, ...tuning } = opts
    this.#settings = { ...tuning, modelDir: path, dtype, device, threads: threads ?? 0 }
    this.#grammars = new GrammarService({ modelDir: opts.path, dtype }, opts.grammar ?? {},
      (port, scope) => this.#worker?.postMessage({ type: 'grammar_port', port, scope } satisfies ToWorker, [port]))
  }

  get grammarCounts (): GrammarCounts {
    return this.#grammars.counts
  }

  state (): BackendState {
    return this.#current
  }

  /** Requests being generated right now. */
  get activeRequests (): number {
    return this.#streams.size
  }

  get activeSequences (): number {
    return this.#inEngine.size
  }

  load (): Promise<void> {
    this.#loading ??= this.#spawn()
    return this.#loading
  }

  async #spawn (): Promise<void> {
    try {
      // Checked here first so a missing or broken directory is reported at once, with its file.
      readModelDir(this.#settings.modelDir, this.#settings.dtype)
    } catch (err) {
      const missing = err instanceof ModelDirError && /missing|not found/.test(err.message)
      this.#current = { state: 'unavailable', reason: (err as Error).message, hint: missing ? pullCommand(this.id) : undefined }
      throw err
    }
    const worker = new Worker(new URL('./worker.ts', import.meta.url), { workerData: this.#settings })
    this.#worker = worker
    await new Promise<void>((resolve, reject) => {
      const onFirst = (message: FromWorker): void => {
        if (message.type === 'ready') {
          this.contextLength = message.contextLength
          this.charsPerToken = message.charsPerToken
          this.device = message.device
          this.deviceWhy = message.deviceWhy
          this.cacheOnDevice = message.cacheOnDevice
          this.promptGraph = message.promptGraph
          this.capturePositions = message.capturePositions
          this.captureRows = message.captureRows
          this.#toolFormat = TOOL_FORMATS[message.toolFormat]
          this.#current = { state: 'ready' }
          worker.on('message', (m: FromWorker) => this.#onMessage(m))
          resolve()
        } else if (message.type === 'load_error') {
          this.#current = { state: 'unavailable', reason: message.message }
          void worker.terminate()
          reject(new Error(message.message))
        }
      }
      worker.once('message', onFirst)
      worker.once('error', err => {
        this.#current = { state: 'unavailable', reason: `engine worker failed: ${err.message}` }
        this.#failAll(new ApiError('model_unavailable', `The model '${this.id}' stopped.`, { operatorMessage: `model ${this.id} stopped: ${err.message}` }))
        reject(err)
      })
      worker.once('exit', code => {
        if (this.#current.state === 'ready') this.#current = { state: 'unavailable', reason: `engine worker exited (code ${code})` }
        this.#failAll(new ApiError('model_unavailable', `model ${this.id} is not running`))
        this.#inEngine.clear() // a worker that has exited holds nothing
        this.#worker = null
      })
    })
  }

  /** Tools are rendered into the prompt and calls read from the answer (engine/tools/prompting.ts). */
  toolCallFormat (): ToolCallFormat | undefined {
    return this.#toolFormat
  }

  generate (request: GenerateRequest, signal: AbortSignal): AsyncIterable<GenerateEvent> {
    const events = this.#generate(request, signal)
    return this.#toolFormat ? readToolCalls(events, this.#toolFormat, request) : events
  }

  async * #generate (request: GenerateRequest, signal: AbortSignal): AsyncGenerator<GenerateEvent> {
    const worker = this.#worker
    // The reason may name files on the server: unavailableError gives it to the operator's message only.
    if (this.#current.state === 'unavailable') throw unavailableError(this.id, this.#current)
    if (this.#current.state !== 'ready' || !worker) {
      throw new ApiError('model_unavailable', `The model '${this.id}' is not available: it is still loading.`, { headers: { 'retry-after': '5' } })
    }
    const id = randomUUID()
    // Its scope's grammar worker holds its matcher: not let go for another scope until it ends.
    const releaseGrammar = request.responseFormat && jsonFormatOf(request.responseFormat) ? this.#grammars.hold(request.grammarScope ?? '') : undefined
    const stream = new Readable({ objectMode: true, read () {} })
    this.#streams.set(id, stream)
    const cancel = (): void => this.#post({ type: 'cancel', id })
    signal.addEventListener('abort', cancel, { once: true })
    this.#inEngine.add(id)
    this.#post({ type: 'generate', id, request })
    if (signal.aborted) cancel()
    let finished = false
    try {
      for await (const event of stream as AsyncIterable<GenerateEvent>) {
        yield event
        if (event.type === 'finish') {
          finished = true
          return
        }
      }
    } finally {
      signal.removeEventListener('abort', cancel)
      this.#streams.delete(id)
      releaseGrammar?.()
      // The consumer stopped reading early: the worker must stop too.
      if (!finished) cancel()
    }
  }

  /** Hands the worker a finished reply's conversation to compute ahead while it is idle (next-turn.ts), for `cacheScope` alone. */
  prepareNextTurn (messages: ChatMessage[], cacheScope?: string): void {
    if (this.#current.state === 'ready') this.#post({ type: 'next_turn', messages, ...(cacheScope !== undefined ? { cacheScope } : {}) })
  }

  /** Compiles the formats' grammars for `scope` in the grammar workers (grammar-service.ts), together; a schema it cannot use is a 400. */
  async prepareResponseFormats (formats: ResponseFormat[], opts: { scope: string; signal?: AbortSignal }): Promise<void> {
    const json = formats.map(jsonFormatOf)
    if (json.some(format => format === undefined)) throw new Error('prepareResponseFormats takes JSON formats only')
    if (json.length === 0) return
    if (this.#current.state !== 'ready' || !this.#worker) throw new ApiError('model_unavailable', `model ${this.id} is not available`)
    await this.#grammars.compile(json as JsonFormat[], opts)
  }

  onEngineSteps (listener: (tokens: number[]) => void): void {
    this.#stepListeners.push(listener)
  }

  #onMessage (message: FromWorker): void {
    if (message.type === 'ahead') this.promptTokensComputedAhead += message.positions
    if (message.type === 'stats') {
      this.engineStats = message.stats
      if (message.steps.length > 0) for (const listener of this.#stepListeners) listener(message.steps)
    }
    if (!('id' in message)) return
    // The engine reports every sequence's end, cancelled ones included, as finish or error.
    if (message.type !== 'delta') this.#inEngine.delete(message.id)
    const stream = this.#streams.get(message.id)
    if (!stream) return
    switch (message.type) {
      case 'delta':
        stream.push({
          type: 'delta',
          ...(message.reasoning !== '' ? { reasoning: message.reasoning } : {}),
          ...(message.content !== '' ? { content: message.content } : {}),
          ...(message.logprobs ? { logprobs: message.logprobs } : {}),
        } satisfies GenerateEvent)
        break
      case 'finish':
        stream.push({
          type: 'finish',
          reason: message.reason,
          usage: message.usage,
          ...(message.stopSequence !== undefined ? { stopSequence: message.stopSequence } : {}),
          ...(message.timings ? { timings: message.timings } : {}),
        } satisfies GenerateEvent)
        stream.push(null)
        break
      case 'error':
        stream.destroy(new ApiError(message.code, message.message, { param: message.param }))
        break
    }
  }

  #post (message: ToWorker): void {
    this.#worker?.postMessage(message)
  }

  #failAll (error: ApiError): void {
    for (const stream of this.#streams.values()) stream.destroy(error)
  }

  async close (): Promise<void> {
    await this.#grammars.close()
    const worker = this.#worker
    if (!worker) return
    const closed = new Promise<void>(resolve => {
      worker.on('message', (m: FromWorker) => { if (m.type === 'closed') resolve() })
      worker.once('exit', () => resolve())
    })
    this.#post({ type: 'close' })
    await closed
    await worker.terminate()
    this.#worker = null
  }
}
