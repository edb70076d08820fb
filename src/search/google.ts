// Google Programmable Search (Custom Search JSON API): GET
// https://www.googleapis.com/customsearch/v1?key=...&cx=...&q=...&num=N
// (N at most 10). Reply: {"items":[{"title","link","snippet"}, ...]}; no
// "items" when nothing was found.

import { getJson, plainText, text } from './http.ts'
import { SearchProviderError, type SearchProvider, type SearchResult } from './provider.ts'

export const GOOGLE_CSE_ENDPOINT = 'https://www.googleapis.com/customsearch/v1'

export class GoogleProvider implements SearchProvider {
  readonly name = 'google'
  readonly #key: string
  readonly #engineId: string
  readonly #endpoint: string

  constructor (opts: { key: string; engineId: string; endpoint?: string }) {
    this.#key = opts.key
    this.#engineId = opts.engineId
    this.#endpoint = opts.endpoint ?? GOOGLE_CSE_ENDPOINT
  }

  async search (query: string, count: number, signal: AbortSignal): Promise<SearchResult[]> {
    const url = new URL(this.#endpoint)
    url.searchParams.set('key', this.#key)
    url.searchParams.set('cx', this.#engineId)
    url.searchParams.set('q', query)
    url.searchParams.set('num', String(Math.min(count, 10)))
    const reply = await getJson(this.name, url, {}, signal) as { items?: unknown }
    if (typeof reply !== 'object' || reply === null || (reply.items !== undefined && !Array.isArray(reply.items))) {
      throw new SearchProviderError('unreadable', 'google sent JSON that is not a search reply')
    }
    return ((reply.items ?? []) as Array<Record<string, unknown>>)
      .map(r => ({ title: plainText(text(r?.title)), url: text(r?.link), snippet: plainText(text(r?.snippet)) }))
      .filter(r => r.url !== '')
      .slice(0, count)
  }
}
