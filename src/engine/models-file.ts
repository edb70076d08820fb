// models.json: its schema, and reading it. The file lists every model the
// server offers; nothing about a model is hard-coded. Each entry is validated
// (errors name the entry), and `${ENV}` references in its strings are filled
// from the environment (.env included). The registry turns entries into
// backends (registry.ts); `chatd pull` reads the same entries to fetch files
// (src/pull/), so this module imports neither.

import { isAbsolute, resolve } from 'node:path'
import { Type, type Static } from 'typebox'
import { Compile } from 'typebox/compile'
import { DEFAULT_DTYPE, ONNX_FILES_BY_DTYPE, type ModelDtype } from './onnx/model-dir.ts'

// ---------------------------------------------------------------------------
// The file's shape

const ModelId = Type.String({ pattern: '^[A-Za-z0-9][A-Za-z0-9._:/@+-]{0,127}$' })

/** How a reasoning model's thinking reaches the client (docs/design.md "Reasoning"). */
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
  device: Type.Optional(Type.Enum(['auto', 'cpu', 'cuda', 'webgpu'])),
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
  /**
   * The API the upstream is spoken to in: "chat" (chat completions, the default), "responses"
   * (OpenAI's Responses API) or "messages" (Anthropic's Messages API).
   */
  api: Type.Optional(Type.Enum(['chat', 'responses', 'messages'])),
  reasoning: Type.Optional(ReasoningMode),
  /** Send top_k upstream (vLLM, llama.cpp, Ollama accept it; OpenAI's API rejects it). Default false. */
  passTopK: Type.Optional(Type.Boolean()),
  /** Send the request's cache scope (per account and cache_salt) as `cache_salt` (vLLM); relay the upstream's cached_tokens only then. Default false. */
  passCacheSalt: Type.Optional(Type.Boolean()),
  /**
   * Send the token cap as max_completion_tokens instead of max_tokens (OpenAI's own API, whose
   * reasoning models refuse max_tokens). Default: true when baseUrl's host is api.openai.com.
   */
  maxCompletionTokens: Type.Optional(Type.Boolean()),
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
// Paths and hints

/** The command that fetches a local model's files by hand. */
export function pullCommand (id: string): string {
  return `npx chatd pull ${id}`
}

export function pullHint (id: string): string {
  return `run: ${pullCommand(id)}`
}

/** The files a local model directory holds, for messages that ask someone to put them there. */
export function modelDirLayout (dtype: string = DEFAULT_DTYPE): string {
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
  return `put the model directory (${modelDirLayout(entry.dtype)}) at ${path}, or add "hubRepo" (the Hugging Face repository it comes from) to its entry in models.json and run: ${pullCommand(entry.id)}`
}

/** A local model's directory: its path from models.json, relative to `baseDir` unless absolute. */
export function modelPath (entry: OnnxModelEntry, baseDir: string): string {
  return isAbsolute(entry.path) ? entry.path : resolve(baseDir, entry.path)
}

/**
 * The device a local model runs on: its entry's "device", else ONNX_DEVICE; and who asked, as the
 * device's errors name it (absent: ONNX_DEVICE).
 */
export function entryDevice<D extends string> (entry: OnnxModelEntry, onnxDevice: D): { device: NonNullable<OnnxModelEntry['device']> | D; deviceFrom?: string } {
  return entry.device === undefined ? { device: onnxDevice } : { device: entry.device, deviceFrom: `models.json entry "${entry.id}"` }
}
