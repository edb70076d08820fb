// Builds the response objects: the whole chat.completion for a non-streamed
// reply, and the chunks of a streamed one.

import { randomBytes } from 'node:crypto'
import type { FinishReason, GenerateEvent, Usage } from '../../engine/backend.ts'
import { ApiError } from '../../errors.ts'
import type { SearchResult } from '../../search/provider.ts'
import type { ChatCompletion, ChatCompletionChunk, SearchResultItem } from './schema.ts'

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

export interface CollectedCompletion {
  content: string
  reasoning: string
  finishReason: FinishReason
  usage: Usage
}

/** Drains the events of one generation into the full text. */
export async function collect (events: AsyncIterable<GenerateEvent>): Promise<CollectedCompletion> {
  let content = ''
  let reasoning = ''
  for await (const event of events) {
    if (event.type === 'delta') {
      content += event.content ?? ''
      reasoning += event.reasoning ?? ''
    } else {
      return { content, reasoning, finishReason: event.reason, usage: event.usage }
    }
  }
  throw new ApiError('internal_error', 'The model stopped without finishing the reply.')
}

export function completionBody (meta: CompletionMeta, done: CollectedCompletion & { finishReason: VisibleFinish }): ChatCompletion {
  return {
    id: meta.id,
    object: 'chat.completion',
    created: meta.created,
    model: meta.model,
    system_fingerprint: meta.systemFingerprint,
    choices: [{
      index: 0,
      message: done.reasoning === ''
        ? { role: 'assistant', content: done.content }
        : { role: 'assistant', content: done.content, reasoning_content: done.reasoning },
      finish_reason: done.finishReason,
    }],
    usage: done.usage,
    ...(meta.searchResults ? { search_results: meta.searchResults } : {}),
  }
}

/** Chunk builders, in stream order. `withUsageField` puts `usage: null` on every chunk but the last, as OpenAI does with include_usage. */
export function chunkMaker (meta: CompletionMeta, withUsageField: boolean) {
  const base = (choices: ChatCompletionChunk['choices']): ChatCompletionChunk => ({
    id: meta.id,
    object: 'chat.completion.chunk',
    created: meta.created,
    model: meta.model,
    system_fingerprint: meta.systemFingerprint,
    choices,
    ...(withUsageField ? { usage: null } : {}),
  })
  return {
    role: () => ({
      ...base([{ index: 0, delta: { role: 'assistant', content: '' }, finish_reason: null }]),
      ...(meta.searchResults ? { search_results: meta.searchResults } : {}),
    }),
    delta: (event: Extract<GenerateEvent, { type: 'delta' }>) => {
      const delta: ChatCompletionChunk['choices'][number]['delta'] = {}
      if (event.reasoning) delta.reasoning_content = event.reasoning
      if (event.content) delta.content = event.content
      return base([{ index: 0, delta, finish_reason: null }])
    },
    finish: (reason: VisibleFinish) => base([{ index: 0, delta: {}, finish_reason: reason }]),
    usage: (usage: Usage) => ({ ...base([]), usage }),
  }
}
