// What every web search provider implements, and the one error they throw.
// Providers only speak their HTTP API; timeouts, caching and the mapping to
// the API's search_failed error live in web-search.ts.

export interface SearchResult {
  title: string
  url: string
  snippet: string
}

export interface SearchProvider {
  /** searxng, google or brave: for logs and error messages. */
  readonly name: string
  /** Up to `count` results for `query`, best first. Throws SearchProviderError. */
  search (query: string, count: number, signal: AbortSignal): Promise<SearchResult[]>
}

/**
 * A provider failed. `message` is safe to show a client: it never holds the
 * provider's key, nor its address (a self-hosted SearXNG's URL is private).
 */
export class SearchProviderError extends Error {
  readonly kind: 'timeout' | 'unreachable' | 'status' | 'unreadable'

  constructor (kind: SearchProviderError['kind'], message: string) {
    super(message)
    this.name = 'SearchProviderError'
    this.kind = kind
  }
}
