// The seam between UpstreamBackend's one loop (retries, timeouts, abort, byte
// bounds, usage estimates, failure mapping: backend.ts) and the API an upstream
// speaks. A wire builds that API's request body and reads its stream events
// into ReplyPieces; wire-chat.ts (chat completions), wire-responses.ts
// (OpenAI's Responses API) and wire-messages.ts (Anthropic's Messages API).

import type { GenerateRequest } from '../backend.ts'
import type { RelayedParam } from './failures.ts'
import { isObject, type Json } from './json.ts'
import type { ReplyPiece } from './reply.ts'

/** models.json `api`: which API the upstream is spoken to in. */
export type WireApi = 'chat' | 'responses' | 'messages'

/** How an entry's model is addressed upstream (its models.json fields). */
export interface WireModel {
  /** The model's name on the upstream. */
  upstreamModel: string
  /** Send top_k (vLLM, llama.cpp, Ollama and chatd accept it; OpenAI's API rejects it). */
  passTopK: boolean
  /**
   * Send the request's cache scope as `cache_salt` (vLLM), so the upstream's prefix cache is
   * split by account as chatd's own is; without it, the upstream's cached_tokens are not relayed.
   */
  passCacheSalt?: boolean
  /** Send the token cap as max_completion_tokens (OpenAI's own API: its reasoning models refuse max_tokens). */
  maxCompletionTokens?: boolean
}

/** Reads one streamed reply, an SSE event at a time. */
export interface StreamReader {
  /** One event (its `event:` name, if any, and its data): what it adds to the reply, if anything. */
  read (event: string | undefined, data: string): ReplyPiece | undefined
  /** The upstream said the reply is complete; nothing after it is read. */
  readonly done: boolean
}

export interface Wire {
  readonly api: WireApi
  /** The path under baseUrl that generations are POSTed to. */
  readonly path: string
  /** The API's own headers and the ones that carry the upstream's key (none when it has none; never logged). */
  headers (apiKey: string | undefined): Record<string, string>
  /** The body for one generation, always streamed; throws ApiError for what this API cannot carry. */
  body (request: GenerateRequest): Record<string, unknown>
  /** Whether the API carries stop strings; where it does not, the backend cuts the text at them itself. */
  readonly sendsStop: boolean
  /** The API keeps thinking apart from the answer, so the answer's text is never split at `<think>`. */
  readonly separatesReasoning: boolean
  streamReader (): StreamReader
  /** A whole JSON reply (an upstream that answered without streaming). */
  readWhole (text: string): ReplyPiece
  /** Statuses before any reply that are worth another attempt. */
  retryable (status: number): boolean
  /** The relayed field a 400 body in this API's error shape names, if any (the client's to fix). */
  relayedParam (body: unknown): RelayedParam | undefined
}

/** `<baseUrl>/<path>`. Throws (without echoing the URL, which may be private) when baseUrl is no http(s) URL. */
export function endpointUrl (baseUrl: string, path: string): URL {
  let url: URL
  try {
    url = new URL(baseUrl)
  } catch {
    throw new Error('baseUrl is not a valid URL')
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') throw new Error('baseUrl must start with http:// or https://')
  const base = url.pathname.replace(/\/+$/, '')
  url.pathname = base.endsWith(`/${path}`) ? base : `${base}/${path}`
  return url
}

/** A tool call's JSON arguments as an object (the Messages API's `input`); text that is no object is kept under `arguments`. */
export function argumentsObject (text: string): Json {
  try {
    const value: unknown = JSON.parse(text === '' ? '{}' : text)
    return isObject(value) ? value : { arguments: value }
  } catch {
    return { arguments: text }
  }
}

/** `Authorization: Bearer <key>` (OpenAI's APIs and their kin); nothing without a key. */
export function bearer (apiKey: string | undefined): Record<string, string> {
  return apiKey ? { authorization: `Bearer ${apiKey}` } : {}
}
