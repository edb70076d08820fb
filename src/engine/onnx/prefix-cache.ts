// Caches of earlier sequences, kept for later requests that start with the
// same tokens. A chat client sends the whole conversation again every turn;
// everything up to the new message was computed the turn before, and on a CPU
// the prompt is the slow part. Each entry is one row's cache and the token ids
// it holds. Entries are found the way vLLM finds cached blocks: a hash chain
// over fixed-size blocks of token ids (each block's key hashes the block and
// the key before it, so one key names the whole prefix up to it), confirmed
// token by token, then extended within the next partial block. The engine
// keeps the entries within the KV cache budget it admits requests by, least
// recently used out first.
import type { CacheLayout, RowCache } from './kv-cache.ts'

/** Tokens per hashed block; also the shortest prefix worth reusing (shorter ones cost a copy and save nothing). */
export const BLOCK = 16

export interface PrefixEntry {
  /** The token ids whose keys and values the cache holds, in order. */
  readonly tokens: readonly number[]
  /** One row holding exactly `tokens.length` positions. */
  readonly cache: RowCache
  lastUsed: number
}

export interface PrefixMatch {
  entry: PrefixEntry
  /** Positions of the entry the new sequence may reuse. */
  length: number
}

export class PrefixCache {
  readonly #layout: CacheLayout
  readonly #entries = new Set<PrefixEntry>()
  /** Chain key of a block -> the entries whose tokens contain that whole prefix. */
  readonly #byBlock = new Map<number, Set<PrefixEntry>>()
  #clock = 0

  constructor (layout: CacheLayout) {
    this.#layout = layout
  }

  get size (): number {
    return this.#entries.size
  }

  /** Cached positions held by every entry. */
  get positions (): number {
    let n = 0
    for (const e of this.#entries) n += e.tokens.length
    return n
  }

  /**
   * The entry sharing the longest prefix with `tokens`, at most `limit` positions of it (a
   * sequence must feed at least its last prompt token to get logits). Null when none shares one.
   */
  lookup (tokens: readonly number[], limit: number): PrefixMatch | null {
    const keys = chainKeys(tokens)
    let candidates: Set<PrefixEntry> | undefined
    let blocks = 0
    for (const key of keys) {
      const next = this.#byBlock.get(key)
      if (!next) break
      // Hash collisions are possible; keep only entries whose tokens really match this block.
      const matching = new Set([...next].filter(e => sameTokens(e.tokens, tokens, blocks * BLOCK, (blocks + 1) * BLOCK)))
      if (matching.size === 0) break
      candidates = matching
      blocks++
    }
    // Within the last partial block (or with no whole block in common), compare token by token.
    const pool = candidates ?? this.#entries
    let best: PrefixMatch | null = null
    for (const entry of pool) {
      let length = blocks * BLOCK
      const end = Math.min(entry.tokens.length, tokens.length)
      while (length < end && entry.tokens[length] === tokens[length]) length++
      if (length > (best?.length ?? 0)) best = { entry, length }
    }
    if (!best) return null
    best.length = Math.min(best.length, limit)
    if (best.length < BLOCK) return null
    best.entry.lastUsed = ++this.#clock
    return best
  }

  /** A new one-row cache holding the match's positions, for the sequence to continue from. */
  take (match: PrefixMatch): RowCache {
    return this.#layout.gather([{ cache: match.entry.cache, row: 0, length: match.length }])
  }

  /**
   * Keeps `cache` (one row, taken over: the caller must not free it) as the cache of `tokens`.
   * Entries whose tokens are a prefix of these are dropped: the new one serves them too.
   */
  insert (tokens: readonly number[], cache: RowCache): void {
    for (const e of [...this.#entries]) {
      if (e.tokens.length <= tokens.length && sameTokens(e.tokens, tokens, 0, e.tokens.length)) this.#remove(e)
      else if (e.tokens.length > tokens.length && sameTokens(e.tokens, tokens, 0, tokens.length)) {
        // Already held by a longer entry.
        this.#layout.free(cache)
        e.lastUsed = ++this.#clock
        return
      }
    }
    const entry: PrefixEntry = { tokens: [...tokens], cache, lastUsed: ++this.#clock }
    this.#entries.add(entry)
    for (const key of chainKeys(entry.tokens)) {
      let set = this.#byBlock.get(key)
      if (!set) this.#byBlock.set(key, set = new Set())
      set.add(entry)
    }
  }

  /** Whether `entry` is still kept (not evicted). */
  holds (entry: PrefixEntry): boolean {
    return this.#entries.has(entry)
  }

  /** Frees the least recently used entry other than `keep`; false when there is none. */
  evictOldest (keep?: PrefixEntry): boolean {
    let oldest: PrefixEntry | undefined
    for (const e of this.#entries) if (e !== keep && (!oldest || e.lastUsed < oldest.lastUsed)) oldest = e
    if (!oldest) return false
    this.#remove(oldest)
    return true
  }

  clear (): void {
    for (const e of [...this.#entries]) this.#remove(e)
  }

  #remove (entry: PrefixEntry): void {
    if (!this.#entries.delete(entry)) return
    for (const key of chainKeys(entry.tokens)) {
      const set = this.#byBlock.get(key)
      set?.delete(entry)
      if (set?.size === 0) this.#byBlock.delete(key)
    }
    this.#layout.free(entry.cache)
  }
}

/** One key per whole block of `tokens`: FNV-1a over the block, seeded with the previous key. */
function chainKeys (tokens: readonly number[]): number[] {
  const keys: number[] = []
  let key = 0x811c9dc5
  for (let start = 0; start + BLOCK <= tokens.length; start += BLOCK) {
    for (let i = start; i < start + BLOCK; i++) {
      let id = tokens[i]
      for (let byte = 0; byte < 4; byte++) {
        key = Math.imul(key ^ (id & 0xff), 0x01000193) >>> 0
        id >>>= 8
      }
    }
    keys.push(key)
  }
  return keys
}

function sameTokens (a: readonly number[], b: readonly number[], from: number, to: number): boolean {
  if (a.length < to || b.length < to) return false
  for (let i = from; i < to; i++) if (a[i] !== b[i]) return false
  return true
}
