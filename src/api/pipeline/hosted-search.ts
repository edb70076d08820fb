// Hosted web search, as the Responses and Messages doors offer it: the model
// gets a `web_search` function; when a round of the reply ends in calls to it
// (and only to it), chatd runs each search with the configured provider, each
// search is an event of the reply's stream (events.ts: the door shows it in its
// own shape, a web_search_call item, or server_tool_use and
// web_search_tool_result blocks), and the results go to the model as the calls'
// results (rounds.ts generates again, in the same admission and usage row). At
// most SEARCHES_MAX searches per reply, fewer when the client asks; after the
// last one the model must answer. A search that fails tells the model so rather
// than failing the reply; the client leaving or the shutdown's deadline stops it
// (the request's stop signal). An earlier turn's search, sent back, reaches the
// model again as the call and the result it read (`replayedCall`,
// `replayedResult`).

import type { ChatMessage, ToolCall, ToolDefinition } from '../../engine/backend.ts'
import { ApiError } from '../../errors.ts'
import { sourcesBlock } from '../../prompt/search-context.ts'
import type { SearchResult } from '../../search/provider.ts'
import { searchQuery } from '../../search/query.ts'
import type { WebSearch } from '../../search/web-search.ts'
import type { SearchEvent } from './events.ts'
import type { ContinueAfterCalls } from './rounds.ts'

/** Searches one reply may run, whatever the client asks. */
export const SEARCHES_MAX = 3

/** The function the model is offered for the hosted search, and the name its calls carry. */
export const WEB_SEARCH_FUNCTION = 'web_search'

/** The function's definition (a fresh object: the pipeline may normalise what it is given). */
export const webSearchFunction = (): ToolDefinition => ({
  type: 'function',
  function: {
    name: WEB_SEARCH_FUNCTION,
    description: 'Search the web. Returns the top results, each with its title, URL and a snippet.',
    parameters: { type: 'object', properties: { query: { type: 'string', description: 'What to search for.' } }, required: ['query'] },
  },
})

export interface HostedSearchOptions {
  /** Whose searches these are (the account): the search cache is kept per scope. */
  scope: string
  /** Searches this reply may run (at most SEARCHES_MAX). */
  maxUses?: number
  /** Results kept (the client's domain filters); the others are neither shown nor given to the model. */
  keep?: (result: SearchResult) => boolean
}

/** The query a call asks for, collapsed and cut as every provider accepts it; undefined when it names none. */
export function searchCallQuery (call: ToolCall): string | undefined {
  let args: unknown
  try {
    args = JSON.parse(call.function.arguments)
  } catch {
    return undefined
  }
  const query = (args as { query?: unknown } | null)?.query
  if (typeof query !== 'string' || query.trim() === '') return undefined
  return searchQuery([{ role: 'user', content: query }])
}

/** What the model is told for a search call that was not run, and why. */
export const searchNotRun = (why: string): string => `No search was run: ${why}. Answer with what you have.`

/** What the model is told for a search that failed (the provider's message, when it gave one). */
export const searchFailed = (why = 'Web search failed.'): string => `${why} Answer from what you know, and say that the search failed.`

/** Results replayed from one earlier search, at most (a provider returns ten). */
export const REPLAYED_RESULTS_MAX = 20

/** An earlier turn's search call, as the model wrote it. */
export function replayedCall (id: string, query: string): ToolCall {
  return { id, type: 'function', function: { name: WEB_SEARCH_FUNCTION, arguments: JSON.stringify({ query }) } }
}

/** An earlier turn's search result as the model read it: its results (at most REPLAYED_RESULTS_MAX), or that it failed. */
export function replayedResult (query: string, results: SearchResult[] | undefined): string {
  return results === undefined ? searchFailed() : sourcesBlock(query, results.slice(0, REPLAYED_RESULTS_MAX))
}

/** The rounds' hook: runs the round's searches, each an event of the reply's stream, and hands back their results. */
export function hostedSearchRounds (search: WebSearch, opts: HostedSearchOptions): ContinueAfterCalls {
  const maxUses = Math.min(opts.maxUses ?? SEARCHES_MAX, SEARCHES_MAX)
  let searches = 0
  return async function * (calls, signal) {
    // Calls to the client's functions end the reply: the client runs those (and hosted ones among them are dropped).
    if (!calls.every(call => call.function.name === WEB_SEARCH_FUNCTION)) return undefined
    // Searched out and still asking: the reply ends here (every round is bounded so).
    if (searches >= maxUses) {
      for (const call of calls) yield { type: 'search', status: 'refused', call, why: 'max_uses_exceeded' } satisfies SearchEvent
      return undefined
    }
    const results: ChatMessage[] = []
    for (const call of calls) {
      const query = searchCallQuery(call)
      if (query === undefined || searches >= maxUses) {
        yield { type: 'search', status: 'refused', call, why: query === undefined ? 'invalid_tool_input' : 'max_uses_exceeded' } satisfies SearchEvent
        const why = query === undefined ? 'the call named no query' : `at most ${maxUses} searches are run per reply`
        results.push({ role: 'tool', toolCallId: call.id, content: searchNotRun(why) })
        continue
      }
      searches++
      yield { type: 'search', status: 'searching', call, query } satisfies SearchEvent
      let kept: SearchResult[]
      try {
        const found = await search.search(query, signal, opts.scope)
        kept = opts.keep ? found.filter(opts.keep) : found
      } catch (err) {
        if (signal.aborted) throw err
        yield { type: 'search', status: 'failed', call, query } satisfies SearchEvent
        results.push({ role: 'tool', toolCallId: call.id, content: searchFailed(err instanceof ApiError ? err.message : undefined) })
        continue
      }
      yield { type: 'search', status: 'done', call, query, results: kept } satisfies SearchEvent
      results.push({ role: 'tool', toolCallId: call.id, content: sourcesBlock(query, kept) })
    }
    return { results, toolChoice: searches >= maxUses ? 'none' : 'auto' }
  }
}
