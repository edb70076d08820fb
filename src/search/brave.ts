// Brave Search API: GET https://api.search.brave.com/res/v1/web/search?q=...&count=N
// (N at most 20) with the key in X-Subscription-Token. Reply:
// {"web":{"results":[{"title","url","description"}, ...]}}; no "web" when
// nothing was found.

import { getJson, plainText, text } from './http.ts'
import { SearchProviderError, type SearchProvider, type SearchResult } from './provider.ts'

export const BRAVE_SEARCH_ENDPOINT = 'https://api.search.brave.com/res/v1/web/search'

export class BraveProvider implements SearchProvider {
  readonly name = 'brave'
  readonly #key: string
  readonly #endpoint: string

  constructor (opts: { key: string; endpoint?: string }) {
    this.#key = opts.key
    this.#endpoint = opts.endpoint ?? BRAVE_SEARCH_ENDPOINT
  }

  async search (query: string, count: number, signal: AbortSignal): Promise<SearchResult[]> {
    const url = new URL(this.#endpoint)
    url.searchParams.set('q', query)
    url.searchParams.set('count', String(Math.min(count, 20)))
    const reply = await getJson(this.name, url, { 'x-subscription-token': this.#key }, signal) as { web?: { results?: unknown } }
    if (typeof reply !== 'object' || reply === null) throw new SearchProviderError('unreadable', 'brave sent JSON that is not a search reply')
    if (reply.web === undefined) return []
    if (typeof reply.web !== 'object' || reply.web === null || !Array.isArray(reply.web.results)) {
      throw new SearchProviderError('unreadable', 'brave sent JSON without web results')
    }
    return (reply.web.results as Array<Record<string, unknown>>)
      .map(r => ({ title: plainText(text(r?.title)), url: text(r?.url), snippet: plainText(text(r?.description)) }))
      .filter(r => r.url !== '')
      .slice(0, count)
  }
}
