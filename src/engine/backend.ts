// The one interface every model backend implements. The HTTP layer only ever
// talks to a Backend; backends never know about HTTP.

import { ApiError } from '../errors.ts'

export type Role = 'system' | 'user' | 'assistant' | 'tool'

export interface ChatMessage {
  role: Role
  content: string
  /** An assistant turn's tool calls (its `content` may then be ''). */
  toolCalls?: ToolCall[]
  /** A `tool` message: the id of the call whose result it carries. */
  toolCallId?: string
}

/** A call the model made: `arguments` is the JSON text of the arguments, as OpenAI sends it. */
export interface ToolCall {
  id: string
  type: 'function'
  function: { name: string; arguments: string }
}

/**
 * How a model family writes tool calls, for backends that render tools into the prompt themselves
 * (src/engine/tools/: r1.ts, json-form.ts).
 */
/** A call as the model wrote it: `arguments` is the JSON text of an object. */
export interface WrittenCall {
  name: string
  arguments: string
}

export interface ToolCallFormat {
  /** `r1` (DeepSeek's tool tokens) or `json` (the generic form). */
  readonly name: 'r1' | 'json'
  /** The text that starts a call in the model's answer; the answer before it is text. */
  readonly callStart: string
  /** One or more calls as the model should write them (and as earlier turns show them). */
  calls (calls: WrittenCall[]): string
  /**
   * `text` starts with `callStart`: the calls it holds, or undefined when it is not made only of
   * well-formed calls with JSON-object arguments.
   */
  parse (text: string): WrittenCall[] | undefined
  /**
   * A call written by construction (tool_choice `required` or a named tool): `open`, then the
   * tool's name, then `afterName`, then the arguments (one JSON object, under the tool's schema),
   * then `close`. Written this way, the text parses back with `parse`.
   */
  readonly forced: { open: string; afterName: string; close: string }
}

/** A function tool the client declares: `parameters` is a JSON Schema of its arguments. */
export interface ToolDefinition {
  type: 'function'
  function: { name: string; description?: string; parameters?: Record<string, unknown>; strict?: boolean }
}

/** `tool_choice`: may the model call a tool, must it, or must it call this one. */
export type ToolChoice = 'auto' | 'none' | 'required' | { type: 'function'; function: { name: string } }

/** One streamed piece of a tool call, as OpenAI streams them: the id and name first, then argument text. */
export interface ToolCallDelta {
  index: number
  id?: string
  name?: string
  arguments?: string
}

export interface GenerateRequest {
  /** The conversation exactly as the model should see it (controls already applied). */
  messages: ChatMessage[]
  /** Upper bound on generated tokens; undefined means "until the context ends". */
  maxTokens?: number
  /**
   * Upper bound on prompt plus generated tokens (the tier's tokens per minute): a backend that
   * knows the prompt's real length (the local engine) stops the reply there, so one request never
   * takes more than the minute's budget however the prompt's estimate missed. Absent: none.
   */
  maxTotalTokens?: number
  /** 0 means greedy. */
  temperature: number
  /** 1 means off. */
  topP: number
  /** 0 means off. */
  topK: number
  /** Makes sampling reproducible when given. */
  seed?: number
  /** Strings that end generation; they are never emitted. */
  stop: string[]
  /** Report each generated token's log-probability (and `topLogprobs` alternatives) with the text. */
  logprobs?: boolean
  /** 0-20 most likely alternatives per token, with `logprobs`. */
  topLogprobs?: number
  /** The client's `response_format`: constrains the answer to JSON (local engine) or is passed on (upstream). */
  responseFormat?: ResponseFormat
  /**
   * Thinking tokens a model may write before a constrained answer (models.json `thinkingBudget`;
   * 0 or absent: no cap). Only read with a JSON `responseFormat`.
   */
  thinkingBudget?: number
  /**
   * Whose prefix cache the request may reuse and add to: an opaque string the server derives from
   * the authenticated account (and the request's cache_salt), never one a client sets. Requests
   * reuse only cache computed for the same scope. Absent: one scope for every such request.
   */
  cacheScope?: string
  /**
   * Whose compiled grammar a JSON `responseFormat` uses (the account, set by the server): grammars
   * are cached per scope, so no account can tell whether another used a schema.
   */
  grammarScope?: string
  /** OpenAI's penalties over the generated tokens (thinking included), -2..2; absent: 0. */
  presencePenalty?: number
  frequencyPenalty?: number
  /** Token id (as a decimal string) -> bias added to its logit, -100..100. */
  logitBias?: Record<string, number>
  /** 0..1: drop tokens less likely than min_p times the most likely one. */
  minP?: number
  /** How long a reasoning model may think (the local engine's budgets: reasoning-effort.ts); absent: as it likes. */
  reasoningEffort?: ReasoningEffort
  /** The client's function tools; absent or empty: none. */
  tools?: ToolDefinition[]
  /** The client's `tool_choice` (default `auto` with tools). */
  toolChoice?: ToolChoice
  /** false: at most one call per reply. */
  parallelToolCalls?: boolean
  /**
   * The sampling fields the client itself sent (the others hold the API's defaults). A relay sends
   * only these, so the upstream's own defaults apply to the rest; absent: all were sent.
   */
  clientSampling?: { temperature: boolean; topP: boolean; topK: boolean }
  /**
   * W3C trace context headers (`traceparent`, `tracestate`) of the span that stands for this call,
   * set by the server when tracing is on: a backend that calls another server sends them along.
   */
  traceContext?: Record<string, string>
}

export type ReasoningEffort = 'none' | 'minimal' | 'low' | 'medium' | 'high'

/** `response_format` as the client sent it (validated); `text` means no constraint. */
export type ResponseFormat =
  | { type: 'text' }
  | { type: 'json_object' }
  | { type: 'json_schema'; json_schema: JsonSchemaFormat }

export interface JsonSchemaFormat {
  name: string
  description?: string
  /** A JSON Schema; absent: any JSON object. */
  schema?: Record<string, unknown>
  strict?: boolean
}

/** A response format that constrains the output, or undefined for plain text. */
export function jsonFormatOf (format: ResponseFormat | undefined): Exclude<ResponseFormat, { type: 'text' }> | undefined {
  return format === undefined || format.type === 'text' ? undefined : format
}

/** One candidate token and its log-probability, in the widely used (OpenAI) shape. */
export interface TopLogprob {
  token: string
  logprob: number
  /** The token's UTF-8 bytes (a token may hold part of a character); null when unknown (some upstreams). */
  bytes: number[] | null
}

/** A generated token: its own log-probability and the most likely alternatives at its position. */
export interface TokenLogprob extends TopLogprob {
  top_logprobs: TopLogprob[]
}

/** The tokens whose text one delta carries: of the answer, and of the thinking. */
export interface DeltaLogprobs {
  content: TokenLogprob[]
  reasoning: TokenLogprob[]
}

export interface Usage {
  prompt_tokens: number
  completion_tokens: number
  total_tokens: number
  /** Local models: prompt tokens whose cache was reused from an earlier request instead of computed. */
  prompt_tokens_details?: { cached_tokens: number }
  /** Tokens of the reply generated inside thinking (local models: exact; upstream: as it reports). */
  completion_tokens_details?: { reasoning_tokens: number }
}

export type FinishReason = 'stop' | 'length' | 'tool_calls' | 'cancelled'

/**
 * Milliseconds since the epoch, to the microsecond, on the one clock every thread shares: the
 * engine thread's times are compared with the main thread's (performance.now() alone starts at
 * each thread's own origin).
 */
export function wallClock (): number {
  return performance.timeOrigin + performance.now()
}

/** When a backend did what for one generation (wallClock() times), as far as it knows: for metrics and traces. */
export interface GenerateTimings {
  /** Local engine: the request entered the engine's queue, and left it (its prompt started). */
  queuedAt?: number
  scheduledAt?: number
  /** Local engine: the first and the last token sampled. */
  firstTokenAt?: number
  lastTokenAt?: number
  /** Upstream: the request went out (its first attempt), and the upstream's status line came back. */
  sentAt?: number
  respondedAt?: number
}

/** One run of a local engine's model: a prompt chunk alone, decode steps alone, or both in one run. */
export type StepKind = 'prefill' | 'decode' | 'mixed'

/** What a local engine reports of itself, for the metrics (KV cache, prefix cache, steps). */
export interface EngineStats {
  /** Sequences whose prompt or output is being computed, and those still waiting in the queue. */
  running: number
  waiting: number
  /** Share of the KV cache budget held for running sequences (what admission counts), 0 to 1. */
  kvUsage: number
  /** Share of the KV cache budget that finished requests' kept caches (the prefix cache) hold, 0 to 1. */
  prefixCacheUsage: number
  /** Prompt tokens looked up in the prefix cache, and those found there, since start. */
  prefixQueries: number
  prefixHits: number
  /** Runs of the model by kind since start, and the tokens they fed. */
  steps: Record<StepKind, number>
  stepTokens: Record<StepKind, number>
  /** Tokens decoded on the capture step since start (ONNX_WEBGPU_CAPTURE: replays of the recorded step); 0 without it. */
  replayedTokens: number
}

export type GenerateEvent =
  | { type: 'delta'; content?: string; reasoning?: string; logprobs?: DeltaLogprobs; toolCalls?: ToolCallDelta[] }
  /**
   * `stopSequence`: the request's stop string that ended the reply (finish reason `stop`), when the backend knows it.
   * `timings`: when the backend did what (metrics, traces, the timings a client may ask for).
   */
  | { type: 'finish'; reason: FinishReason; usage: Usage; stopSequence?: string; timings?: GenerateTimings }

/** How far a download of a model's files has got (src/pull/, auto-pull). */
export interface DownloadProgress {
  file?: string
  /** Bytes of the model on disk (complete files plus the current one's part). */
  downloadedBytes: number
  totalBytes: number
  /** 0-100, one decimal. */
  percent: number
  bytesPerSecond: number
  etaSeconds?: number
}

export type DownloadState =
  | ({ state: 'downloading' } & DownloadProgress)
  | { state: 'failed'; error: string; hint: string }

/** A backend that is still fetching its files (auto-pull) says how far it got, and logs where it is told to. */
export interface DownloadingBackend extends Backend {
  /** The download while it runs or after it failed; undefined once the files are complete. */
  download (): DownloadState | undefined
  attachLog (log: { info: (obj: object, msg: string) => void; error: (obj: object, msg: string) => void }): void
}

export function isDownloading (backend: Backend): backend is DownloadingBackend {
  return typeof (backend as Partial<DownloadingBackend>).download === 'function'
}

export type BackendState =
  | { state: 'loading' }
  | { state: 'ready' }
  /**
   * `reason` and `hint` are the operator's (they may name paths on the server
   * and commands to run): logs, the CLI and admin accounts see them.
   * `summary` is what every key holder is told; absent, a generic line.
   * `retryAfterS`: the model comes back by itself (its files are being downloaded), so a client
   * may retry after that many seconds; absent, only the operator can bring it back (files
   * missing, a download or load that failed, settings unset), and clients are told to stop.
   */
  | { state: 'unavailable'; reason: string; hint?: string; summary?: string; retryAfterS?: number }

/** What a backend's grammar compiles came to (metrics). */
export interface GrammarCounts {
  compiles: number
  timedOut: number
  cancelled: number
  failed: number
  busy: number
  inFlight: number
  replaced: number
  /** Serving grammar workers running (one per scope). */
  workers: number
  /** Serving workers let go to make room for another scope's (past their memory bound, or never up). */
  retired: number
  /** Serving workers handed from one scope to another (their grammars and matchers dropped). */
  reassigned: number
}

export interface Backend {
  readonly id: string
  /** The model's context window in tokens, when known. */
  readonly contextLength?: number
  /**
   * Characters of prompt per token of this model's tokenizer, where measured (chars-per-token.ts;
   * the local engine's, once loaded): the tier limits' estimate of a prompt before it runs.
   */
  readonly charsPerToken?: number
  /**
   * Sequences the backend's own engine holds right now: waiting, in prompt
   * processing or decoding, and cancelled ones until they have actually
   * stopped. Absent for backends without an engine of their own (upstream).
   */
  readonly activeSequences?: number
  /** Prompt positions computed ahead for conversations' next turns since start (prepareNextTurn); absent without an engine. */
  readonly promptTokensComputedAhead?: number
  /** The engine's latest report of itself (metrics); absent without an engine, or before its first report. */
  readonly engineStats?: EngineStats
  /** Hands `listener` the tokens each engine step fed, as the engine reports them (a histogram of steps); absent without an engine. */
  onEngineSteps? (listener: (tokens: number[]) => void): void
  /** Local models, once loaded: the execution provider the engine runs on (cpu, cuda or webgpu). */
  readonly device?: string
  /** Local models, once loaded: why that device (asked for by name, or what `auto` found). */
  readonly deviceWhy?: string
  /** Local models, once loaded: whether the KV cache stays in the device's memory between steps. */
  readonly cacheOnDevice?: boolean
  state (): BackendState
  /** Starts loading; resolves when ready or rejects when the model cannot be used. */
  load (): Promise<void>
  /**
   * Streams events for one completion. Throws ApiError (e.g. context_length_exceeded)
   * before yielding anything when the request cannot be served. When `signal` aborts,
   * generation stops within one step and the stream ends with finish reason "cancelled".
   */
  generate (request: GenerateRequest, signal: AbortSignal): AsyncIterable<GenerateEvent>
  /**
   * Gets a request's JSON formats ready once it is admitted (its `response_format`, or a forced
   * call's tools' arguments): the local engine compiles (and caches, per `scope`) their grammars
   * in a worker of its own, under one time limit for them all, and throws FormatCompileError (its
   * `index` names the format) when a schema cannot be compiled or not in time, or a 429/503 when
   * too many compiles are in flight. When `signal` aborts the compile stops and the promise
   * rejects. Absent for backends that pass formats on.
   */
  prepareResponseFormats? (formats: ResponseFormat[], opts: { scope: string; signal?: AbortSignal }): Promise<void>
  /** Grammar compiles since start (metrics); absent without a local engine. */
  readonly grammarCounts?: GrammarCounts
  /**
   * A reply has finished: `messages` is its conversation as the next turn's request will start
   * (the request's messages, then the reply as an assistant message). A backend with a prefix
   * cache may compute it ahead, while idle, so the next turn computes only its new message.
   * It is kept for `cacheScope`'s requests alone (the finished request's own scope).
   * Absent where there is nothing to gain (upstream).
   */
  prepareNextTurn? (messages: ChatMessage[], cacheScope?: string): void
  /**
   * The way this backend's model writes tool calls, where the backend renders `tools` into the
   * prompt itself (the local engine: the prompt layer adds the tools block of this format; with
   * tool_choice `required` or a named tool the backend writes the call by construction, its tools'
   * schemas compiled through prepareResponseFormats first). Absent: the backend passes tools on (upstream).
   */
  toolCallFormat? (): ToolCallFormat | undefined
  close (): Promise<void>
}

/**
 * A format of the request cannot be used (or not within the compile's limits): invalid_parameter
 * naming `response_format`; `index` is the format's place in prepareResponseFormats' list (a
 * forced call's tool), so the door can name the field it came from.
 */
export class FormatCompileError extends ApiError {
  readonly index: number

  constructor (message: string, index: number) {
    super('invalid_parameter', message, { param: 'response_format' })
    this.index = index
  }
}
