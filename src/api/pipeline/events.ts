// The one event stream a door renders: the backend's GenerateEvents, and the
// hosted searches the pipeline runs between rounds of the reply (rounds.ts,
// hosted-search.ts). A door draws a search from its events like any other
// event (a web_search_call item, server_tool_use and web_search_tool_result
// blocks); a door that offers no hosted search never gets one.

import type { GenerateEvent, ToolCall } from '../../engine/backend.ts'
import type { SearchResult } from '../../search/provider.ts'

/** Why a call to the search was not run: it named no query, or the reply's searches were used up. */
export type SearchRefusal = 'invalid_tool_input' | 'max_uses_exceeded'

/**
 * A hosted search, for the model's `call`: `searching` as it starts (the round that asked for it
 * has ended: what it showed closes), then `done` with the results the model is given, or `failed`
 * (the model is told so); `refused` when it is not run at all.
 */
export type SearchEvent =
  | { type: 'search'; status: 'searching'; call: ToolCall; query: string }
  | { type: 'search'; status: 'done'; call: ToolCall; query: string; results: SearchResult[] }
  | { type: 'search'; status: 'failed'; call: ToolCall; query: string }
  | { type: 'search'; status: 'refused'; call: ToolCall; why: SearchRefusal }

export type CompletionEvent = GenerateEvent | SearchEvent

export type Delta = Extract<GenerateEvent, { type: 'delta' }>
export type Finish = Extract<GenerateEvent, { type: 'finish' }>
