// models.json -> backends. The file lists every model the server offers; nothing
// about a model is hard-coded. Each entry is validated at boot (errors name the
// entry), `${ENV}` references in its strings are filled from the environment,
// and a factory per backend kind turns it into a Backend. A model that cannot be
// used (files missing, variable unset, load failed) stays listed as unavailable
// with a reason and a hint, and the server and the other models keep working.

import { createHash } from 'node:crypto'
import { existsSync, readFileSync } from 'node:fs'
import { dirname, isAbsolute, resolve } from 'node:path'
import { Type, type Static } from 'typebox'
import { Compile } from 'typebox/compile'
import type { Config } from '../config.ts'
import { ApiError } from '../errors.ts'
import type { Backend, BackendState, GenerateEvent } from './backend.ts'
import { UpstreamBackend } from './upstream/backend.ts'
import { ONNX_FILES_BY_DTYPE, type ModelDtype } from './onnx/model-dir.ts'
import type { DownloadState, PullingBackend } from '../pull/pulling-backend.ts'

// ---------------------------------------------------------------------------
// The file's shape

const ModelId = Type.String({ pattern: '^[A-Za-z0-9][A-Za-z0-9._:/@+-]{0,127}$' })

/** How a reasoning model's thinking reaches the client (DESIGN.md "Reasoning"). */
const ReasoningMode = Type.Enum(['separate', 'inline', 'hidden'])

/**
 * Where the model takes instructions: "system" (a system message, the default) or "user" (the
 * start of the first user turn, for models whose authors advise against system prompts).
 */
const SystemPrompt = Type.Enum(['system', 'user'])

/** Tokens of thinking allowed on top of the answer when `wordcount` sets the token budget (0: the model does not reason). */
const ThinkingBudget = Type.Integer({ minimum: 0, maximum: 1000000 })

const OnnxEntry = Type.Object({
  id: ModelId,
  backend: Type.Literal('onnx'),
  /** Model directory, relative to the directory holding models.json, or absolute. */
  path: Type.String({ minLength: 1 }),
  dtype: Type.Optional(Type.String({ minLength: 1 })),
  reasoning: Type.Optional(ReasoningMode),
  /** Overrides ONNX_DEVICE / ONNX_THREADS for this model. */
  device: Type.Optional(Type.Enum(['auto', 'cpu', 'cuda'])),
  threads: Type.Optional(Type.Integer({ minimum: 0 })),
  /**
   * What hubRepo holds: "onnx" (default), a model directory in the onnx-community layout, used as
   * it comes; "checkpoint", a Hugging Face safetensors checkpoint that `chatd pull` converts here
   * with chatd's own converter (dtype q4, fp16 or fp32).
   */
  source: Type.Optional(Type.Enum(['onnx', 'checkpoint'])),
  /** Hugging Face repository ("owner/name") that `chatd pull` and auto-pull fetch the files from. */
  hubRepo: Type.Optional(Type.String({ pattern: '^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$' })),
  /** Branch, tag or commit of hubRepo; "main" by default. Pin a full commit so every pull gets the same files. */
  hubRevision: Type.Optional(Type.String({ minLength: 1 })),
  thinkingBudget: Type.Optional(ThinkingBudget),
  /** Lowers the model's context length (prompt + generated tokens) below what its files allow. */
  contextLength: Type.Optional(Type.Integer({ minimum: 1 })),
  systemPrompt: Type.Optional(SystemPrompt),
})

const OpenAiEntry = Type.Object({
  id: ModelId,
  backend: Type.Literal('openai'),
  baseUrl: Type.String({ minLength: 1 }),
  apiKey: Type.Optional(Type.String()),
  upstreamModel: Type.String({ minLength: 1 }),
  reasoning: Type.Optional(ReasoningMode),
  /** Send top_k upstream (vLLM, llama.cpp, Ollama accept it; OpenAI's API rejects it). Default false. */
  passTopK: Type.Optional(Type.Boolean()),
  /** The upstream's template leaves the prompt inside an open <think> (R1 served without a reasoning parser). Default false. */
  startsInReasoning: Type.Optional(Type.Boolean()),
  /** The upstream model's context window in tokens, when known (caps wordcount's token budget). */
  contextLength: Type.Optional(Type.Integer({ minimum: 1 })),
  thinkingBudget: Type.Optional(ThinkingBudget),
  systemPrompt: Type.Optional(SystemPrompt),
})

export type OnnxModelEntry = Static<typeof OnnxEntry>
export type OpenAiModelEntry = Static<typeof OpenAiEntry>
export type ModelEntry = OnnxModelEntry | OpenAiModelEntry
export type ReasoningMode = Static<typeof ReasoningMode>

const checkOnnx = Compile(OnnxEntry)
const checkOpenAi = Compile(OpenAiEntry)

export class ModelsFileError extends Error {
  constructor (message: string) {
    super(message)
    this.name = 'ModelsFileError'
  }
}

export interface ParsedEntry {
  entry: ModelEntry
  /** Names of `${VAR}` references that the environment does not define. */
  missingVariables: string[]
}

/**
 * Parses and validates models.json text. Structural problems throw a
 * ModelsFileError naming the entry; unset `${VAR}`s do not throw (that model
 * becomes unavailable, the others still serve).
 */
export function parseModelsFile (text: string, env: Record<string, string | undefined>, fileName = 'models.json'): ParsedEntry[] {
  let doc: unknown
  try {
    doc = JSON.parse(text)
  } catch (err) {
    throw new ModelsFileError(`${fileName}: not valid JSON: ${(err as Error).message}`)
  }
  const list = (doc as { models?: unknown } | null)?.models
  if (typeof doc !== 'object' || doc === null || !Array.isArray(list)) {
    throw new ModelsFileError(`${fileName}: expected an object {"models": [...]}`)
  }
  const seen = new Set<string>()
  return list.map((raw: unknown, index: number) => {
    const id = typeof (raw as { id?: unknown })?.id === 'string' ? (raw as { id: string }).id : undefined
    const where = `${fileName}: models[${index}]${id === undefined ? '' : ` (id "${id}")`}`
    const backend = (raw as { backend?: unknown })?.backend
    const check = backend === 'onnx' ? checkOnnx : backend === 'openai' ? checkOpenAi : undefined
    if (check === undefined) {
      throw new ModelsFileError(`${where}: "backend" must be "onnx" or "openai" (got ${JSON.stringify(backend)})`)
    }
    if (!check.Check(raw)) {
      const problems = check.Errors(raw).map(e => {
        const missing = (e.params as { requiredProperties?: string[] }).requiredProperties
        const allowed = (e.params as { allowedValues?: unknown[] }).allowedValues
        const field = e.instancePath.replace(/^\//, '').replaceAll('/', '.')
        if (missing) return `missing ${missing.map(m => `"${m}"`).join(', ')}`
        return `"${field}" ${e.message}${allowed ? ` (${allowed.map(v => JSON.stringify(v)).join(', ')})` : ''}`
      })
      throw new ModelsFileError(`${where}: ${[...new Set(problems)].join('; ')}`)
    }
    if (seen.has(id!)) throw new ModelsFileError(`${where}: duplicate id`)
    seen.add(id!)
    const missingVariables: string[] = []
    const entry = interpolate(raw, env, missingVariables) as ModelEntry
    return { entry, missingVariables: [...new Set(missingVariables)] }
  })
}

/**
 * Replaces `${NAME}` in every string value; records names the environment lacks.
 * `${NAME:-fallback}` uses the fallback (possibly empty) instead, for optional
 * values such as an upstream key that a local Ollama does not need.
 */
function interpolate (value: unknown, env: Record<string, string | undefined>, missing: string[]): unknown {
  if (typeof value === 'string') {
    return value.replace(/\$\{([A-Za-z_][A-Za-z0-9_]*)(:-([^}]*))?\}/g, (_, name: string, hasFallback?: string, fallback?: string) => {
      const found = env[name]
      if (found === undefined || found === '') {
        if (hasFallback !== undefined) return fallback ?? ''
        missing.push(name)
        return ''
      }
      return found
    })
  }
  if (Array.isArray(value)) return value.map(v => interpolate(v, env, missing))
  if (typeof value === 'object' && value !== null) {
    return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, interpolate(v, env, missing)]))
  }
  return value
}

// ---------------------------------------------------------------------------
// Backends that cannot serve

/** Stands in for a model that cannot be used; every request gets 503 model_unavailable with the hint. */
export class UnavailableBackend implements Backend {
  readonly id: string
  readonly #reason: string
  readonly #hint?: string

  constructor (id: string, reason: string, hint?: string) {
    this.id = id
    this.#reason = reason
    this.#hint = hint
  }

  state (): BackendState {
    return { state: 'unavailable', reason: this.#reason, hint: this.#hint }
  }

  async load (): Promise<void> {
    throw new Error(this.#reason)
  }

  async * generate (): AsyncIterable<GenerateEvent> {
    throw unavailableError(this.id, this.state() as Extract<BackendState, { state: 'unavailable' }>)
  }

  async close (): Promise<void> {}
}

export function unavailableError (id: string, state: Extract<BackendState, { state: 'unavailable' }>): ApiError {
  const hint = state.hint ? ` (${state.hint})` : ''
  return new ApiError('model_unavailable', `The model '${id}' is unavailable: ${state.reason}${hint}`, { param: 'model' })
}

// ---------------------------------------------------------------------------
// Factories: one per backend kind

export interface FactoryContext {
  config: Pick<Config, 'onnxDevice' | 'onnxThreads' | 'queueSize'> & Partial<Pick<Config, 'maxBatch' | 'prefillChunk' | 'kvCacheBytes' | 'prefixCache'>>
    & Partial<Pick<Config, 'modelsDir' | 'autoPull' | 'hfEndpoint' | 'hfToken'>>
    & Partial<Pick<Config, 'upstream' | 'env'>>
  /** Directory that relative model paths are resolved against (MODELS_DIR, else the one holding models.json). */
  baseDir: string
}

export type BackendFactory<E extends ModelEntry = ModelEntry> = (entry: E, ctx: FactoryContext) => Promise<Backend>

export function pullHint (id: string): string {
  return `run: npx chatd pull ${id}`
}

/** The files a local model directory holds, for messages that ask someone to put them there. */
export function modelDirLayout (dtype = 'q4'): string {
  const onnx = (ONNX_FILES_BY_DTYPE[dtype as ModelDtype] ?? ['model*.onnx']).map(f => `onnx/${f}`).join(' or ')
  return `Hugging Face / onnx-community layout: config.json, generation_config.json, tokenizer.json, tokenizer_config.json, ${onnx}`
}

/**
 * What to do about a local model whose files are not on disk: pull them, or,
 * for an entry without a hubRepo (chatd pull has nowhere to fetch it from),
 * put them there or name the repository.
 */
export function missingFilesHint (entry: OnnxModelEntry, path: string): string {
  if (entry.hubRepo) return pullHint(entry.id)
  return `put the model directory (${modelDirLayout(entry.dtype)}) at ${path}, or add "hubRepo" (the Hugging Face repository it comes from) to its entry in models.json and run: npx chatd pull ${entry.id}`
}

/** A local model's directory: its path from models.json, relative to `baseDir` unless absolute. */
export function modelPath (entry: OnnxModelEntry, baseDir: string): string {
  return isAbsolute(entry.path) ? entry.path : resolve(baseDir, entry.path)
}

export const createOnnx: BackendFactory<OnnxModelEntry> = async (entry, ctx) => {
  const path = modelPath(entry, ctx.baseDir)
  if (entry.hubRepo && ctx.config.autoPull) {
    // Imported on demand: only a server that has files to fetch loads the downloader.
    const autoPull = await import('../pull/auto-pull.ts')
    if (autoPull.modelFilesMissing(path, entry.dtype)) {
      return autoPull.createPullingBackend(entry, path, ctx.config, () => openOnnx(entry, path, ctx))
    }
  }
  if (!existsSync(path)) {
    return new UnavailableBackend(entry.id, `model files not found at ${path}`, missingFilesHint(entry, path))
  }
  return openOnnx(entry, path, ctx)
}

async function openOnnx (entry: OnnxModelEntry, path: string, ctx: FactoryContext): Promise<Backend> {
  // Imported on demand so a server without local models never loads onnxruntime.
  let engine: typeof import('./onnx/backend.ts')
  try {
    engine = await import('./onnx/backend.ts')
  } catch (err) {
    return new UnavailableBackend(entry.id, `the local ONNX engine could not be loaded: ${(err as Error).message}`)
  }
  const threads = entry.threads ?? ctx.config.onnxThreads
  return engine.createOnnxBackend({
    id: entry.id,
    path,
    dtype: entry.dtype,
    device: entry.device ?? ctx.config.onnxDevice,
    threads: threads === 0 ? undefined : threads,
    maxBatch: ctx.config.maxBatch,
    prefillChunk: ctx.config.prefillChunk,
    contextLength: entry.contextLength,
    kvCacheBytes: ctx.config.kvCacheBytes,
    prefixCache: ctx.config.prefixCache,
  })
}

export const createOpenAi: BackendFactory<OpenAiModelEntry> = async (entry, ctx) => {
  // A bad baseUrl throws here (the message never echoes it) and the model is listed as unavailable.
  return new UpstreamBackend({
    id: entry.id,
    baseUrl: entry.baseUrl,
    apiKey: entry.apiKey,
    upstreamModel: entry.upstreamModel,
    passTopK: entry.passTopK,
    startsInReasoning: entry.startsInReasoning,
    contextLength: entry.contextLength,
    settings: ctx.config.upstream,
  })
}

export type BackendFactories = { onnx: BackendFactory<OnnxModelEntry>; openai: BackendFactory<OpenAiModelEntry> }

export const defaultFactories: BackendFactories = { onnx: createOnnx, openai: createOpenAi }

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
  requestedDevice?: 'auto' | 'cpu' | 'cuda'
  /** Where chatd's instruction and client system messages go (models.json `systemPrompt`). */
  systemPrompt: 'system' | 'user'
}

/** A backend still fetching its files (CHATD_AUTO_PULL); see src/pull/pulling-backend.ts. */
function asPulling (backend: Backend): PullingBackend | undefined {
  return typeof (backend as Partial<PullingBackend>).download === 'function' ? backend as PullingBackend : undefined
}

export type ModelStatus = BackendState['state']

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
        backend = new UnavailableBackend(entry.id, `environment variable${missingVariables.length > 1 ? 's' : ''} ${missingVariables.join(', ')} not set`, `set ${missingVariables.join(', ')} in the environment or .env`)
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
    if (loadError !== undefined && state.state !== 'unavailable') return { state: 'unavailable', reason: loadError }
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
    if (models.some(m => this.state(m.id).state === 'loading' || asPulling(m.backend)?.download()?.state === 'downloading')) return 'loading'
    return models.some(m => this.state(m.id).state === 'ready') ? 'ready' : 'unavailable'
  }

  /** Whether the server is ready to serve (see readiness()). */
  ready (): boolean {
    return this.readiness() === 'ready'
  }

  /** Downloads of model files started by the server (auto-pull), running or failed, by model id. */
  downloads (): Record<string, DownloadState> {
    return Object.fromEntries(this.list().flatMap(m => {
      const download = asPulling(m.backend)?.download()
      return download ? [[m.id, download]] : []
    }))
  }

  /** Starts loading every usable model in the background; resolves when all have settled. */
  loadAll (log?: RegistryLogger): Promise<void> {
    this.#loading ??= Promise.all(this.list().map(async model => {
      const pulling = asPulling(model.backend)
      if (pulling && log) pulling.attachLog(log)
      if (model.backend.state().state === 'unavailable' && !pulling) {
        const state = this.state(model.id) as Extract<BackendState, { state: 'unavailable' }>
        log?.warn({ model: model.id, reason: state.reason, hint: state.hint }, 'model unavailable')
        return
      }
      const started = performance.now()
      try {
        await model.backend.load()
        // Which execution provider the engine settled on (local models report it), said once at start.
        const device = (model.backend as { device?: string }).device
        log?.info({ model: model.id, ms: Math.round(performance.now() - started), ...(device ? { device } : {}) }, 'model ready')
        if (device === 'cpu' && model.requestedDevice === 'auto') {
          log?.info({ model: model.id, device }, 'ONNX_DEVICE=auto: the CUDA execution provider is not available on this machine, so the model runs on the CPU')
        }
      } catch (err) {
        this.#loadErrors.set(model.id, `loading failed: ${(err as Error).message}`)
        log?.error({ model: model.id, err }, 'model failed to load')
      }
    })).then(() => {})
    return this.#loading
  }

  async close (): Promise<void> {
    await Promise.allSettled(this.list().map(m => m.backend.close()))
  }
}

// ---------------------------------------------------------------------------
// Reasoning modes

/**
 * Applies a model's reasoning mode to a backend's events. Backends put thinking
 * in `reasoning` deltas (the ReasoningSplitter in reasoning.ts, or an upstream's
 * own reasoning field) and the answer in `content` deltas; within one delta the
 * reasoning comes first.
 * - `separate`: thinking goes on as reasoning (message.reasoning_content);
 * - `hidden`: thinking is dropped;
 * - `inline`: thinking stays in the content as the model wrote it, the block
 *   closed by `</think>` (R1's template opens it in the prompt, so the text
 *   starts without `<think>`; one is written only when answer text came first,
 *   which can only mean the model opened the block itself).
 * In `separate` and `hidden` the blank lines R1 writes between `</think>` and the
 * answer are dropped, so `content` starts with the answer itself.
 */
export async function * withReasoningMode (events: AsyncIterable<GenerateEvent>, mode: ReasoningMode): AsyncIterable<GenerateEvent> {
  let thinking = false
  let contentSeen = false
  /** After a thinking block, until the answer's first visible character. */
  let trimAnswer = false
  for await (const event of events) {
    if (event.type !== 'delta') {
      yield event
      continue
    }
    const reasoning = event.reasoning ?? ''
    let content = event.content ?? ''
    if (mode === 'inline') {
      let text = ''
      if (reasoning !== '') {
        if (!thinking && contentSeen) text += '<think>'
        thinking = true
        text += reasoning
      }
      if (content !== '') {
        if (thinking) text += '</think>'
        thinking = false
        contentSeen = true
        text += content
      }
      if (text !== '') yield { type: 'delta', content: text }
      continue
    }
    if (reasoning !== '') trimAnswer = true
    if (trimAnswer && content !== '') {
      content = content.trimStart()
      if (content !== '') trimAnswer = false
    }
    const out: Extract<GenerateEvent, { type: 'delta' }> = { type: 'delta' }
    if (mode === 'separate' && reasoning !== '') out.reasoning = reasoning
    if (content !== '') out.content = content
    if (out.reasoning !== undefined || out.content !== undefined) yield out
  }
}
