// Hosted web search, as the Responses and Messages doors offer it: the model
// gets a `web_search` function; when a round of the reply ends in calls to it
// (and only to it), chatd runs each search with the configured provider, the
// door shows it in its own shape (a web_search_call item, or server_tool_use
// and web_search_tool_result blocks), and the results go to the model as the
// calls' results (rounds.ts generates again, in the same admission and usage
// row). At most SEARCHES_MAX searches per reply, fewer when the client asks;
// after the last one the model must answer. A search that fails tells the
// model so rather than failing the reply; the client leaving or the shutdown's
// deadline stops it (the request's stop signal).

import type { ChatMessage, ToolCall, ToolDefinition } from '../engine/backend.ts'
import { ApiError } from '../errors.ts'
import { sourcesBlock } from '../prompt/search-context.ts'
import type { SearchResult } from '../search/provider.ts'
import { searchQuery } from '../search/query.ts'
import type { WebSearch } from '../search/web-search.ts'
import type { ContinueAfterCalls } from './pipeline/rounds.ts'

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

/** Why a call to the search was not run: it named no query, or the reply's searches were used up. */
export type SearchRefusal = 'invalid_tool_input' | 'max_uses_exceeded'

/** How a door shows the searches it runs. */
export interface SearchView {
  /** A round ended in search calls: what the round showed so far closes. */
  endRound (): Promise<void>
  /** A search starts; the function returned shows how it went (its results, or undefined: it failed). */
  webSearch (query: string, call: ToolCall): Promise<(results: SearchResult[] | undefined) => Promise<void>>
  /** A search call that was not run (a door that shows nothing for these leaves it out); may come without endRound before it. */
  refused? (call: ToolCall, why: SearchRefusal): Promise<void>
}

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

export function hostedSearchRounds (search: WebSearch, view: SearchView, opts: HostedSearchOptions): ContinueAfterCalls {
  const maxUses = Math.min(opts.maxUses ?? SEARCHES_MAX, SEARCHES_MAX)
  let searches = 0
  return async (calls, signal) => {
    // Calls to the client's functions end the reply: the client runs those (and hosted ones among them are dropped).
    if (!calls.every(call => call.function.name === WEB_SEARCH_FUNCTION)) return undefined
    // Searched out and still asking: the reply ends here (every round is bounded so).
    if (searches >= maxUses) {
      for (const call of calls) await view.refused?.(call, 'max_uses_exceeded')
      return undefined
    }
    await view.endRound()
    const results: ChatMessage[] = []
    for (const call of calls) {
      const query = searchCallQuery(call)
      if (query === undefined || searches >= maxUses) {
        await view.refused?.(call, query === undefined ? 'invalid_tool_input' : 'max_uses_exceeded')
        const why = query === undefined ? 'the call named no query' : `at most ${maxUses} searches are run per reply`
        results.push({ role: 'tool', toolCallId: call.id, content: searchNotRun(why) })
        continue
      }
      searches++
      const done = await view.webSearch(query, call)
      try {
        const found = await search.search(query, signal, opts.scope)
        const kept = opts.keep ? found.filter(opts.keep) : found
        await done(kept)
        results.push({ role: 'tool', toolCallId: call.id, content: sourcesBlock(query, kept) })
      } catch (err) {
        if (signal.aborted) throw err
        await done(undefined)
        results.push({ role: 'tool', toolCallId: call.id, content: searchFailed(err instanceof ApiError ? err.message : undefined) })
      }
    }
    return { results, toolChoice: searches >= maxUses ? 'none' : 'auto' }
  }
}
