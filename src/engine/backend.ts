// The one interface every model backend implements. The HTTP layer only ever
// talks to a Backend; backends never know about HTTP.

export type Role = 'system' | 'user' | 'assistant'

export interface ChatMessage {
  role: Role
  content: string
}

export interface GenerateRequest {
  /** The conversation exactly as the model should see it (controls already applied). */
  messages: ChatMessage[]
  /** Upper bound on generated tokens; undefined means "until the context ends". */
  maxTokens?: number
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
}

export interface Usage {
  prompt_tokens: number
  completion_tokens: number
  total_tokens: number
  /** Local models: prompt tokens whose cache was reused from an earlier request instead of computed. */
  prompt_tokens_details?: { cached_tokens: number }
}

export type FinishReason = 'stop' | 'length' | 'cancelled'

export type GenerateEvent =
  | { type: 'delta'; content?: string; reasoning?: string }
  | { type: 'finish'; reason: FinishReason; usage: Usage }

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
  | { state: 'unavailable'; reason: string; hint?: string }

export interface Backend {
  readonly id: string
  /** The model's context window in tokens, when known. */
  readonly contextLength?: number
  /**
   * Sequences the backend's own engine holds right now: waiting, in prompt
   * processing or decoding, and cancelled ones until they have actually
   * stopped. Absent for backends without an engine of their own (upstream).
   */
  readonly activeSequences?: number
  state (): BackendState
  /** Starts loading; resolves when ready or rejects when the model cannot be used. */
  load (): Promise<void>
  /**
   * Streams events for one completion. Throws ApiError (e.g. context_length_exceeded)
   * before yielding anything when the request cannot be served. When `signal` aborts,
   * generation stops within one step and the stream ends with finish reason "cancelled".
   */
  generate (request: GenerateRequest, signal: AbortSignal): AsyncIterable<GenerateEvent>
  close (): Promise<void>
}
