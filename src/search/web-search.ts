// Web search as the chat route uses it: one configured provider, a time limit,
// a short-lived cache per account and query, and every failure turned into the API's
// search_failed error (502) with a message that names no key or address.

import { ApiError } from '../errors.ts'
import { BraveProvider } from './brave.ts'
import { GoogleProvider } from './google.ts'
import { SearchProviderError, type SearchProvider, type SearchResult } from './provider.ts'
import { SearxngProvider } from './searxng.ts'

export type SearchSettings = (
  | { provider: 'searxng'; url: string }
  | { provider: 'google'; key: string; engineId: string; endpoint?: string }
  | { provider: 'brave'; key: string; endpoint?: string }
) & {
  /** Results put in the prompt (SEARCH_RESULTS). */
  results: number
  /** Whole search, connect to last byte (SEARCH_TIMEOUT_MS). */
  timeoutMs: number
  /** How long a query's results are reused; 0 turns the cache off (SEARCH_CACHE_TTL_MS). */
  cacheTtlMs: number
}

/** Queries remembered at most; the oldest is forgotten first. */
const CACHE_ENTRIES = 256

export function createProvider (settings: SearchSettings): SearchProvider {
  switch (settings.provider) {
    case 'searxng': return new SearxngProvider(settings.url)
    case 'google': return new GoogleProvider({ key: settings.key, engineId: settings.engineId, endpoint: settings.endpoint })
    case 'brave': return new BraveProvider({ key: settings.key, endpoint: settings.endpoint })
  }
}

export class WebSearch {
  readonly provider: SearchProvider
  readonly #results: number
  readonly #timeoutMs: number
  readonly #cacheTtlMs: number
  readonly #cache = new Map<string, { until: number; results: SearchResult[] }>()

  constructor (provider: SearchProvider, opts: { results: number; timeoutMs: number; cacheTtlMs: number }) {
    this.provider = provider
    this.#results = opts.results
    this.#timeoutMs = opts.timeoutMs
    this.#cacheTtlMs = opts.cacheTtlMs
  }

  static fromSettings (settings: SearchSettings): WebSearch {
    return new WebSearch(createProvider(settings), settings)
  }

  /**
   * The top results for `query`. Throws ApiError search_failed when the
   * provider fails or is too slow; rethrows the abort when `signal` (the
   * client going away) ends it first. Cached per `scope` (the account): a
   * cache shared by accounts would tell one, by how fast it answers, what
   * another searched for.
   */
  async search (query: string, signal: AbortSignal, scope: string): Promise<SearchResult[]> {
    const key = `${scope}\u0000${query.toLowerCase()}`
    const cached = this.#cache.get(key)
    if (cached !== undefined && cached.until > Date.now()) return cached.results
    this.#cache.delete(key)

    const timeout = AbortSignal.timeout(this.#timeoutMs)
    let results: SearchResult[]
    try {
      results = await this.provider.search(query, this.#results, AbortSignal.any([signal, timeout]))
    } catch (err) {
      if (signal.aborted) throw signal.reason
      if (timeout.aborted) {
        throw new ApiError('search_failed', `Web search failed: ${this.provider.name} did not answer within ${this.#timeoutMs} ms.`, { param: 'search' })
      }
      const why = err instanceof SearchProviderError ? err.message : `${this.provider.name} failed`
      throw new ApiError('search_failed', `Web search failed: ${why}.`, { param: 'search' })
    }

    if (this.#cacheTtlMs > 0) {
      this.#cache.set(key, { until: Date.now() + this.#cacheTtlMs, results })
      if (this.#cache.size > CACHE_ENTRIES) this.#cache.delete(this.#cache.keys().next().value!)
    }
    return results
  }
}
