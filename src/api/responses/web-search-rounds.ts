// The hosted web_search tool: when a round of the reply ends in calls to it
// (and only to it), chatd runs each search with the configured provider, shows
// a web_search_call item for it, and hands the results to the model as the
// calls' results (rounds.ts generates again). At most SEARCHES_MAX searches per
// response; after the last one the model must answer. A search that fails
// tells the model so rather than failing the response; the client leaving or
// the shutdown's deadline stops it (the request's stop signal).

import type { ChatMessage, ToolCall } from '../../engine/backend.ts'
import { ApiError } from '../../errors.ts'
import { sourcesBlock } from '../../prompt/search-context.ts'
import { searchQuery } from '../../search/query.ts'
import type { WebSearch } from '../../search/web-search.ts'
import type { ContinueAfterCalls } from '../chat/rounds.ts'
import type { OutputAssembler } from './output.ts'
import { WEB_SEARCH_FUNCTION } from './tools.ts'

/** Searches one response may run. */
export const SEARCHES_MAX = 3

/** The query a call asks for, collapsed and cut as every provider accepts it; undefined when it names none. */
function queryOf (call: ToolCall): string | undefined {
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

export function hostedSearchRounds (search: WebSearch, assembler: OutputAssembler): ContinueAfterCalls {
  let searches = 0
  return async (calls, signal) => {
    // Calls to the client's functions end the reply: the client runs those (and hosted ones among them are dropped).
    if (!calls.every(call => call.function.name === WEB_SEARCH_FUNCTION)) return undefined
    // Searched out and still asking: the reply ends here (every round is bounded so).
    if (searches >= SEARCHES_MAX) return undefined
    await assembler.endRound()
    const results: ChatMessage[] = []
    for (const call of calls) {
      const query = queryOf(call)
      if (query === undefined || searches >= SEARCHES_MAX) {
        const why = query === undefined ? 'the call named no query' : `at most ${SEARCHES_MAX} searches are run per response`
        results.push({ role: 'tool', toolCallId: call.id, content: `No search was run: ${why}. Answer with what you have.` })
        continue
      }
      searches++
      const done = await assembler.webSearch(query)
      try {
        const found = await search.search(query, signal)
        await done(found)
        results.push({ role: 'tool', toolCallId: call.id, content: sourcesBlock(query, found) })
      } catch (err) {
        if (signal.aborted) throw err
        await done(undefined)
        const why = err instanceof ApiError ? err.message : 'Web search failed.'
        results.push({ role: 'tool', toolCallId: call.id, content: `${why} Answer from what you know, and say that the search failed.` })
      }
    }
    return { results, toolChoice: searches >= SEARCHES_MAX ? 'none' : 'auto' }
  }
}
