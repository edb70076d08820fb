// Web search results -> the context block the model reads: numbered sources
// with title, URL and snippet, and the request to cite them by number. The
// same numbers are the `index` of the response's `search_results`.

import type { SearchResult } from '../search/provider.ts'

export function sourcesBlock (query: string, results: SearchResult[]): string {
  if (results.length === 0) {
    return `A web search for ${JSON.stringify(query)} found nothing; answer from what you know and say that the search found nothing.`
  }
  const sources = results.map((r, i) => `[${i + 1}] ${r.title}\n${r.url}\n${r.snippet}`.trimEnd())
  return [
    `Web search results for ${JSON.stringify(query)}, numbered. Use them where they help, and cite each one you use by its number, like [1].`,
    ...sources,
  ].join('\n\n')
}
