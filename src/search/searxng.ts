// SearXNG, self-hosted: GET <SEARXNG_URL>/search?q=...&format=json. The
// instance must allow the json format (search.formats in its settings.yml).
// Reply: {"results":[{"title","url","content"}, ...]}.

import { getJson, plainText, text } from './http.ts'
import { SearchProviderError, type SearchProvider, type SearchResult } from './provider.ts'

export class SearxngProvider implements SearchProvider {
  readonly name = 'searxng'
  readonly #endpoint: URL

  constructor (baseUrl: string) {
    this.#endpoint = new URL('search', baseUrl.endsWith('/') ? baseUrl : `${baseUrl}/`)
  }

  async search (query: string, count: number, signal: AbortSignal): Promise<SearchResult[]> {
    const url = new URL(this.#endpoint)
    url.searchParams.set('q', query)
    url.searchParams.set('format', 'json')
    const reply = await getJson(this.name, url, {}, signal) as { results?: unknown }
    if (typeof reply !== 'object' || reply === null || !Array.isArray(reply.results)) {
      throw new SearchProviderError('unreadable', 'searxng sent JSON without a results list')
    }
    return reply.results
      .map((r: Record<string, unknown>) => ({ title: plainText(text(r?.title)), url: text(r?.url), snippet: plainText(text(r?.content)) }))
      .filter(r => r.url !== '')
      .slice(0, count)
  }
}
