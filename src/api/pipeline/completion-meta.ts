// What every door's reply carries whatever its shape: the completion's id
// (made at admission, so the usage row and the response carry the same one),
// when it was made, the model and its fingerprint, the web search results the
// model was given; the finishes a client can see; and the tool calls as they
// are assembled from their streamed pieces.

import { randomBytes } from 'node:crypto'
import type { FinishReason, ToolCall, ToolCallDelta } from '../../engine/backend.ts'
import type { SearchResult } from '../../search/provider.ts'

/** A search result as a reply shows it (`search_results`): numbered from 1. */
export interface SearchResultItem {
  index: number
  title: string
  url: string
  snippet: string
}

export interface CompletionMeta {
  id: string
  created: number
  model: string
  systemFingerprint: string
  /** The web search results the model was given; sent as `search_results` (body, or the stream's first chunk). */
  searchResults?: SearchResultItem[]
}

/** A chat completion's id; made at admission, so the usage row and the response carry the same one. */
export function newCompletionId (): string {
  return 'chatcmpl-' + randomBytes(18).toString('base64url')
}

export function newCompletionMeta (model: string, systemFingerprint: string, searchResults?: SearchResult[], id = newCompletionId()): CompletionMeta {
  return {
    id,
    created: Math.floor(Date.now() / 1000),
    model,
    systemFingerprint,
    ...(searchResults ? { searchResults: searchResults.map((r, i) => ({ index: i + 1, title: r.title, url: r.url, snippet: r.snippet })) } : {}),
  }
}

/** A finish the client can see: `cancelled` only happens once the client has gone. */
export type VisibleFinish = Exclude<FinishReason, 'cancelled'>

/** Appends streamed tool-call pieces to the calls so far: by index, the id and name once, the arguments in order. */
export function assembleToolCalls (calls: ToolCall[], pieces: ToolCallDelta[]): void {
  for (const piece of pieces) {
    const call = calls[piece.index] ??= { id: '', type: 'function', function: { name: '', arguments: '' } }
    if (piece.id !== undefined) call.id = piece.id
    if (piece.name !== undefined) call.function.name += piece.name
    if (piece.arguments !== undefined) call.function.arguments += piece.arguments
  }
}
