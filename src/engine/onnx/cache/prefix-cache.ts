// Caches of earlier sequences, kept for later requests that start with the
// same tokens. A chat client sends the whole conversation again every turn;
// everything up to the new message was computed the turn before, and on a CPU
// the prompt is the slow part. Each entry is one row's cache and the token ids
// it holds. Entries are found the way vLLM finds cached blocks: a hash chain
// over fixed-size blocks of token ids (each block's key hashes the block and
// the key before it, so one key names the whole prefix up to it), confirmed
// token by token, then extended within the next partial block. Every entry
// belongs to one scope (an account, or an account and its cache_salt): the
// scope seeds the hash chain, and an entry is found only by a lookup in its
// own scope, so nothing one account computed is reused, or measurable, by
// another. Which entries give way when the KV cache budget runs short is the
// cache manager's decision (cache-manager.ts).
import type { CacheLayout, RowCache } from './kv-cache.ts'

/** Tokens per hashed block; also the shortest prefix worth reusing (shorter ones cost a copy and save nothing). */
export const BLOCK = 16

export interface PrefixEntry {
  /** Whose entry this is; only lookups in the same scope find it. */
  readonly scope: string
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

  /** Every entry, in no particular order. */
  entries (): Iterable<PrefixEntry> {
    return this.#entries
  }

  /**
   * The entry of `scope` sharing the longest prefix with `tokens`, at most `limit` positions of it
   * (a sequence must feed at least its last prompt token to get logits). Null when none shares one.
   */
  lookup (scope: string, tokens: readonly number[], limit: number): PrefixMatch | null {
    const keys = chainKeys(scope, tokens)
    let candidates: Set<PrefixEntry> | undefined
    let blocks = 0
    for (const key of keys) {
      const next = this.#byBlock.get(key)
      if (!next) break
      // Hash collisions are possible; keep only entries of this scope whose tokens really match this block.
      const matching = new Set([...next].filter(e => e.scope === scope && sameTokens(e.tokens, tokens, blocks * BLOCK, (blocks + 1) * BLOCK)))
      if (matching.size === 0) break
      candidates = matching
      blocks++
    }
    // Within the last partial block (or with no whole block in common), compare token by token.
    const pool = candidates ?? this.#entries
    let best: PrefixMatch | null = null
    for (const entry of pool) {
      if (entry.scope !== scope) continue
      let length = blocks * BLOCK
      const end = Math.min(entry.tokens.length, tokens.length)
      while (length < end && entry.tokens[length] === tokens[length]) length++
      if (length > (best?.length ?? 0)) best = { entry, length }
    }
    if (!best) return null
    best.length = Math.min(best.length, limit)
    if (best.length < BLOCK) return null
    return best
  }

  /** A new one-row cache holding the match's positions, for the sequence to continue from (to `least` positions: CacheLayout.gather). */
  take (match: PrefixMatch, least?: number): RowCache {
    return this.#layout.gather([{ cache: match.entry.cache, row: 0, length: match.length }], least)
  }

  /**
   * Keeps `cache` (one row, taken over: the caller must not free it) as `scope`'s cache of
   * `tokens`. The scope's entries whose tokens are a prefix of these are dropped: the new one
   * serves them too.
   */
  insert (scope: string, tokens: readonly number[], cache: RowCache): void {
    for (const e of [...this.#entries]) {
      if (e.scope !== scope) continue
      if (e.tokens.length <= tokens.length && sameTokens(e.tokens, tokens, 0, e.tokens.length)) this.remove(e)
      else if (e.tokens.length > tokens.length && sameTokens(e.tokens, tokens, 0, tokens.length)) {
        // Already held by a longer entry.
        this.#layout.free(cache)
        e.lastUsed = ++this.#clock
        return
      }
    }
    const entry: PrefixEntry = { scope, tokens: [...tokens], cache, lastUsed: ++this.#clock }
    this.#entries.add(entry)
    for (const key of chainKeys(scope, entry.tokens)) {
      let set = this.#byBlock.get(key)
      if (!set) this.#byBlock.set(key, set = new Set())
      set.add(entry)
    }
  }

  /** Whether `entry` is still kept (not evicted). */
  holds (entry: PrefixEntry): boolean {
    return this.#entries.has(entry)
  }

  /** Marks `entry` as just used (least recently used entries give way first). */
  touch (entry: PrefixEntry): void {
    entry.lastUsed = ++this.#clock
  }

  clear (): void {
    for (const e of [...this.#entries]) this.remove(e)
  }

  /** Frees an entry. */
  remove (entry: PrefixEntry): void {
    if (!this.#entries.delete(entry)) return
    for (const key of chainKeys(entry.scope, entry.tokens)) {
      const set = this.#byBlock.get(key)
      set?.delete(entry)
      if (set?.size === 0) this.#byBlock.delete(key)
    }
    this.#layout.free(entry.cache)
  }
}

/**
 * One key per whole block of `tokens`: FNV-1a over the block, seeded with the previous key; the
 * first block's seed is the scope's own hash, so each scope has a chain of its own.
 */
function chainKeys (scope: string, tokens: readonly number[]): number[] {
  const keys: number[] = []
  let key = 0x811c9dc5
  for (let i = 0; i < scope.length; i++) key = Math.imul(key ^ scope.charCodeAt(i), 0x01000193) >>> 0
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
