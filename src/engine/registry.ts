// models.json's entries -> backends (the file itself: models-file.ts). A
// factory per backend kind turns an entry into a Backend. A model that cannot
// be used (files missing, variable unset, load failed) stays listed as
// unavailable with a reason and a hint, and the server and the other models
// keep working. Fetching missing files (auto-pull) is wrapped around the onnx
// factory where the server is assembled (src/server.ts), not here.

import { createHash } from 'node:crypto'
import { existsSync, readFileSync } from 'node:fs'
import { dirname, resolve } from 'node:path'
import type { Config } from '../config.ts'
import { isDownloading, type Backend, type BackendState, type DownloadState, type GenerateEvent } from './backend.ts'
import { entryDevice, missingFilesHint, modelPath, ModelsFileError, parseModelsFile, type ModelEntry, type OnnxModelEntry, type OpenAiModelEntry, type ReasoningMode } from './models-file.ts'
import { unavailableError, type UnavailableState } from './unavailable.ts'
import { UpstreamBackend } from './upstream/backend.ts'

export { unavailableError }

// ---------------------------------------------------------------------------
// Backends that cannot serve

/**
 * Stands in for a model that cannot be used; every request gets 503
 * model_unavailable: the summary for key holders, the reason and hint for admins.
 */
export class UnavailableBackend implements Backend {
  readonly id: string
  readonly #reason: string
  readonly #hint?: string
  readonly #summary?: string

  constructor (id: string, reason: string, hint?: string, summary?: string) {
    this.id = id
    this.#reason = reason
    this.#hint = hint
    this.#summary = summary
  }

  state (): BackendState {
    return { state: 'unavailable', reason: this.#reason, hint: this.#hint, ...(this.#summary ? { summary: this.#summary } : {}) }
  }

  async load (): Promise<void> {
    throw new Error(this.#reason)
  }

  async * generate (): AsyncIterable<GenerateEvent> {
    throw unavailableError(this.id, this.state() as UnavailableState)
  }

  async close (): Promise<void> {}
}

/** What key holders are told about a local model whose files are missing. */
export const FILES_MISSING_SUMMARY = 'its files are not on this server yet'

// ---------------------------------------------------------------------------
// Factories: one per backend kind

export interface FactoryContext {
  config: Pick<Config, 'onnxDevice' | 'onnxThreads' | 'queueSize'> & Partial<Pick<Config, 'maxBatch' | 'prefillChunk' | 'kvCacheBytes' | 'prefixCache' | 'prefixCacheBytes' | 'prefixCacheSharedPrefix' | 'mixedBatches' | 'promptGraph' | 'webgpuCapture' | 'webgpuCaptureRows' | 'grammar'>>
    & Partial<Pick<Config, 'modelsDir' | 'autoPull' | 'hfEndpoint' | 'hfToken'>>
    & Partial<Pick<Config, 'upstream' | 'env'>>
  /** Directory that relative model paths are resolved against (MODELS_DIR, else the one holding models.json). */
  baseDir: string
}

export type BackendFactory<E extends ModelEntry = ModelEntry> = (entry: E, ctx: FactoryContext) => Promise<Backend>

export const createOnnx: BackendFactory<OnnxModelEntry> = async (entry, ctx) => {
  const path = modelPath(entry, ctx.baseDir)
  if (!existsSync(path)) {
    return new UnavailableBackend(entry.id, `model files not found at ${path}`, missingFilesHint(entry, path), FILES_MISSING_SUMMARY)
  }
  return openOnnx(entry, path, ctx)
}

async function openOnnx (entry: OnnxModelEntry, path: string, ctx: FactoryContext): Promise<Backend> {
  // Imported on demand so a server without local models never loads onnxruntime.
  let engine: typeof import('./onnx/backend.ts')
  try {
    engine = await import('./onnx/backend.ts')
  } catch (err) {
    return new UnavailableBackend(entry.id, `the local ONNX engine could not be loaded: ${(err as Error).message}`, undefined, 'this server cannot run local models')
  }
  const threads = entry.threads ?? ctx.config.onnxThreads
  return engine.createOnnxBackend({
    id: entry.id,
    path,
    dtype: entry.dtype,
    ...entryDevice(entry, ctx.config.onnxDevice),
    threads: threads === 0 ? undefined : threads,
    maxBatch: ctx.config.maxBatch,
    prefillChunk: ctx.config.prefillChunk,
    contextLength: entry.contextLength,
    kvCacheBytes: ctx.config.kvCacheBytes,
    prefixCache: ctx.config.prefixCache,
    prefixCacheBytes: ctx.config.prefixCacheBytes,
    // Placed as prompt shaping places a system prompt for this model, so its tokens are the ones requests start with.
    ...(ctx.config.prefixCacheSharedPrefix ? { sharedPrefix: { text: ctx.config.prefixCacheSharedPrefix, placement: entry.systemPrompt ?? 'system' } } : {}),
    mixedBatches: ctx.config.mixedBatches,
    promptGraph: ctx.config.promptGraph,
    webgpuCapture: ctx.config.webgpuCapture,
    webgpuCaptureRows: ctx.config.webgpuCaptureRows,
    grammar: ctx.config.grammar,
  })
}

export const createOpenAi: BackendFactory<OpenAiModelEntry> = async (entry, ctx) => {
  // A bad baseUrl throws here (the message never echoes it) and the model is listed as unavailable.
  return new UpstreamBackend({
    id: entry.id,
    baseUrl: entry.baseUrl,
    apiKey: entry.apiKey,
    api: entry.api,
    upstreamModel: entry.upstreamModel,
    passTopK: entry.passTopK,
    passCacheSalt: entry.passCacheSalt,
    maxCompletionTokens: entry.maxCompletionTokens,
    startsInReasoning: entry.startsInReasoning,
    contextLength: entry.contextLength,
    settings: ctx.config.upstream,
  })
}

export type BackendFactories = { onnx: BackendFactory<OnnxModelEntry>; openai: BackendFactory<OpenAiModelEntry> }

const defaultFactories: BackendFactories = { onnx: createOnnx, openai: createOpenAi }

// ---------------------------------------------------------------------------
// The registry

export interface RegisteredModel {
  id: string
  backend: Backend
  /** Unix seconds; when this server registered the model. */
  created: number
  /** Changes whenever the model's configuration or chatd's version changes. */
  fingerprint: string
  reasoning: ReasoningMode
  /** Thinking tokens added to a wordcount's token budget (models.json `thinkingBudget`; 0 by default). */
  thinkingBudget?: number
  /** For local models: the execution provider asked for (ONNX_DEVICE or the entry's device). */
  requestedDevice?: 'auto' | 'cpu' | 'cuda' | 'webgpu'
  /** Where chatd's instruction and client system messages go (models.json `systemPrompt`). */
  systemPrompt: 'system' | 'user'
}

/** A backend's download (auto-pull), while one runs or after it failed. */
function downloadOf (backend: Backend): DownloadState | undefined {
  return isDownloading(backend) ? backend.download() : undefined
}

export interface RegistryLogger {
  info: (obj: object, msg: string) => void
  warn: (obj: object, msg: string) => void
  error: (obj: object, msg: string) => void
}

const VERSION = (() => {
  try {
    return (JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as { version: string }).version
  } catch {
    return '0.0.0'
  }
})()

export function fingerprintOf (description: unknown): string {
  return 'fp_' + createHash('sha256').update(VERSION + JSON.stringify(description)).digest('hex').slice(0, 12)
}

const LOAD_FAILED_SUMMARY = 'it failed to load'

export class ModelRegistry {
  readonly #models = new Map<string, RegisteredModel>()
  /** Why load() failed, for backends that do not report it through state(). */
  readonly #loadErrors = new Map<string, string>()
  #loading?: Promise<void>

  constructor (models: Array<Omit<RegisteredModel, 'created' | 'fingerprint' | 'reasoning' | 'systemPrompt'> & Partial<RegisteredModel>>) {
    const created = Math.floor(Date.now() / 1000)
    for (const m of models) {
      this.#models.set(m.id, {
        id: m.id,
        backend: m.backend,
        created: m.created ?? created,
        fingerprint: m.fingerprint ?? fingerprintOf({ id: m.id }),
        reasoning: m.reasoning ?? 'separate',
        thinkingBudget: m.thinkingBudget ?? 0,
        requestedDevice: m.requestedDevice,
        systemPrompt: m.systemPrompt ?? 'system',
      })
    }
  }

  /**
   * Reads MODELS_FILE and builds every backend (without loading them yet).
   * `${VAR}`s come from `env`, else config.env (the environment over .env), else process.env.
   */
  static async fromFile (file: string, opts: { config: FactoryContext['config']; env?: Record<string, string | undefined>; factories?: Partial<BackendFactories> }): Promise<ModelRegistry> {
    let text: string
    try {
      text = readFileSync(file, 'utf8')
    } catch (err) {
      throw new ModelsFileError(`MODELS_FILE ${file}: cannot be read: ${(err as Error).message}`)
    }
    const parsed = parseModelsFile(text, opts.env ?? opts.config.env ?? process.env, file)
    const factories = { ...defaultFactories, ...opts.factories }
    const ctx: FactoryContext = { config: opts.config, baseDir: resolve(opts.config.modelsDir ?? dirname(resolve(file))) }
    const models = []
    for (const { entry, missingVariables } of parsed) {
      let backend: Backend
      if (missingVariables.length > 0) {
        backend = new UnavailableBackend(entry.id, `environment variable${missingVariables.length > 1 ? 's' : ''} ${missingVariables.join(', ')} not set`, `set ${missingVariables.join(', ')} in the environment or .env`, 'its configuration on this server is incomplete')
      } else {
        try {
          backend = entry.backend === 'onnx' ? await factories.onnx(entry, ctx) : await factories.openai(entry, ctx)
        } catch (err) {
          backend = new UnavailableBackend(entry.id, (err as Error).message)
        }
      }
      models.push({
        id: entry.id,
        backend,
        // The upstream key is left out: the fingerprint is public, and a rotated key is the same model.
        fingerprint: fingerprintOf(entry.backend === 'openai' ? { ...entry, apiKey: undefined } : entry),
        reasoning: entry.reasoning ?? 'separate',
        thinkingBudget: entry.thinkingBudget,
        requestedDevice: entry.backend === 'onnx' ? entry.device ?? opts.config.onnxDevice : undefined,
        systemPrompt: entry.systemPrompt,
      })
    }
    return new ModelRegistry(models)
  }

  get (id: string): RegisteredModel | undefined {
    return this.#models.get(id)
  }

  list (): RegisteredModel[] {
    return [...this.#models.values()]
  }

  state (id: string): BackendState {
    const model = this.#models.get(id)
    if (!model) return { state: 'unavailable', reason: 'unknown model' }
    const loadError = this.#loadErrors.get(id)
    const state = model.backend.state()
    if (loadError !== undefined && state.state !== 'unavailable') return { state: 'unavailable', reason: loadError, summary: LOAD_FAILED_SUMMARY }
    // A load that failed stays failed until the operator acts: nothing to come back for.
    if (loadError !== undefined && state.state === 'unavailable') {
      const failed = { ...state, summary: state.summary ?? LOAD_FAILED_SUMMARY }
      delete failed.retryAfterS
      return failed
    }
    return state
  }

  /**
   * The server's readiness (GET /readyz):
   * - `loading` while any model is still loading or downloading its files;
   * - then `ready` when at least one model can answer (unavailable ones do not hold it back);
   * - `unavailable` when none can (every model is unavailable, or there is none).
   */
  readiness (): 'ready' | 'loading' | 'unavailable' {
    const models = this.list()
    if (models.some(m => this.state(m.id).state === 'loading' || downloadOf(m.backend)?.state === 'downloading')) return 'loading'
    return models.some(m => this.state(m.id).state === 'ready') ? 'ready' : 'unavailable'
  }

  /** Whether the server is ready to serve (see readiness()). */
  ready (): boolean {
    return this.readiness() === 'ready'
  }

  /** Downloads of model files started by the server (auto-pull), running or failed, by model id. */
  downloads (): Record<string, DownloadState> {
    return Object.fromEntries(this.list().flatMap(m => {
      const download = downloadOf(m.backend)
      return download ? [[m.id, download]] : []
    }))
  }

  /** Starts loading every usable model in the background; resolves when all have settled. */
  loadAll (log?: RegistryLogger): Promise<void> {
    // Said once however many models it concerns: it is about the machine, not the model.
    let saidCpuFallback = false
    this.#loading ??= Promise.all(this.list().map(async model => {
      const pulling = isDownloading(model.backend) ? model.backend : undefined
      if (pulling && log) pulling.attachLog(log)
      if (model.backend.state().state === 'unavailable' && !pulling) {
        const state = this.state(model.id) as Extract<BackendState, { state: 'unavailable' }>
        log?.warn({ model: model.id, reason: state.reason, hint: state.hint }, 'model unavailable')
        return
      }
      const started = performance.now()
      try {
        await model.backend.load()
        // Which execution provider the engine settled on and why (local models report it), said once at start.
        const { device, deviceWhy, cacheOnDevice } = model.backend
        const { promptGraph, capturePositions, captureRows } = model.backend as { promptGraph?: boolean; capturePositions?: number; captureRows?: number }
        log?.info({
          model: model.id,
          ms: Math.round(performance.now() - started),
          ...(device ? { device, why: deviceWhy, cacheOnDevice } : {}),
          ...(promptGraph ? { promptGraph } : {}),
          // Requests decoding replay their recorded step (ONNX_WEBGPU_CAPTURE, _ROWS); said only when on.
          ...(capturePositions ? { capturePositions, captureRows } : {}),
        }, 'model ready')
        if (device === 'webgpu' && cacheOnDevice === false) {
          // An append graph (the CPU form) or a concat graph without cache_delta runs, uploading its cache every step.
          log?.warn({ model: model.id }, 'this model runs on WebGPU with its KV cache on the host, uploaded every step: it is not in the GPU form. `chatd pull <model id>` converts a checkpoint into the GPU form for a webgpu device; `chatd convert --for gpu` by hand')
        }
        if (device === 'cpu' && model.requestedDevice === 'auto' && !saidCpuFallback) {
          saidCpuFallback = true
          log?.info({ device, why: deviceWhy }, 'ONNX_DEVICE=auto: no GPU that chatd can use (CUDA, or a real GPU through WebGPU) on this machine, so local models run on the CPU')
        }
      } catch (err) {
        this.#loadErrors.set(model.id, `loading failed: ${(err as Error).message}`)
        log?.error({ model: model.id, err }, 'model failed to load')
      }
    })).then(() => {})
    return this.#loading
  }

  async close (): Promise<void> {
    // One at a time: local engines on WebGPU share onnxruntime's one GPU device in this process,
    // and a CI run once aborted ("free(): corrupted unsorted chunks") as two such engines closed
    // together. A failure to close one does not keep the others open.
    for (const m of this.list()) await m.backend.close().catch(() => {})
  }
}
