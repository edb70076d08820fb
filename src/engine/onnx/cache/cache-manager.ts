// The prefix cache's manager: which cached prefix a request may take, what a
// sequence leaves behind for later requests, and which entries give way when
// the KV cache budget runs short. The engine's loop asks it; the entries and
// their index are prefix-cache.ts's.
//
// Privacy: every request carries an opaque cache scope, which the server
// derives from the authenticated account (and the request's cache_salt). A
// request takes cache only from its own scope, so another account's prompts
// can be neither reused nor detected (through cached_tokens or the time to
// the first token). The one exception is the operator's shared prefix
// (PREFIX_CACHE_SHARED_PREFIX): its tokens are the operator's, not an
// account's, and are kept in a scope of their own that every request whose
// prompt starts with exactly those tokens may reuse, up to their end only.
//
// Fair share: a scope's holding is its entries' positions plus its running
// sequences' reservations; with N scopes holding anything, each one's fair
// share is 1/N of the budget. To make room for a scope, its own entries go
// first (least recently used first), then those of the scope holding the
// most, while that scope holds more than its fair share. Entries of a scope
// within its share stay, so one account's flood of requests cannot wipe out
// the others' caches: its requests wait for its running ones instead. Only a
// request that finds nothing else running may take any entry (least recently
// used first): otherwise a request larger than its share could never start.
//
// Kept bound: finished sequences' caches are kept within PREFIX_CACHE_MB, apart
// from the budget's room for running sequences, so a stream of prompts that
// never repeat (every agent request carries its own tools) keeps what it
// computed only up to that bound: memory stays where the operator set it
// instead of climbing to the whole KV budget. Past it, the oldest entry of the
// scope keeping the most goes first, so the scope that floods loses its own.
import { KvBudget, SLOT_SLACK } from './kv-budget.ts'
import type { CacheLayout, RowCache } from './kv-cache.ts'
import { BLOCK, PrefixCache, type PrefixEntry, type PrefixMatch } from './prefix-cache.ts'

export type { PrefixEntry, PrefixMatch }

/** Room a sequence (or a run computing ahead) claims in the budget, and for whom. */
export interface Reservation {
  scope: string
  positions: number
}

/** The scope of the operator's shared prefix; requests' scopes are kept apart from it by their own prefix. */
const SHARED_KEY = 'shared'

/** A request's scope as the cache holds it: no scope a request names can be the shared prefix's. */
function keyOf (scope: string): string {
  return `account:${scope}`
}

export interface MakeRoom {
  /** The entry the newcomer is about to take: freed only with `orKeep`, and last. */
  keep?: PrefixEntry
  orKeep?: boolean
  /** Entries of scopes within their fair share may go too, after all others. */
  anyScope?: boolean
}

export class CacheManager {
  readonly #layout: CacheLayout
  readonly #budget: KvBudget
  readonly #cache: PrefixCache
  /** Positions kept entries may hold in all (their slack included): PREFIX_CACHE_MB, within the budget. */
  readonly keptLimit: number
  /** The shared prefix's token ids; empty when there is none (or it is shorter than a block, too short to reuse). */
  readonly sharedIds: readonly number[]

  constructor (layout: CacheLayout, budget: KvBudget, opts: { sharedIds?: readonly number[]; keptBytes?: number } = {}) {
    this.#layout = layout
    this.#budget = budget
    this.#cache = new PrefixCache(layout)
    const sharedIds = opts.sharedIds ?? []
    this.sharedIds = sharedIds.length >= BLOCK ? sharedIds : []
    this.keptLimit = opts.keptBytes === undefined ? budget.tokens : Math.min(budget.tokens, Math.floor(opts.keptBytes / budget.bytesPerToken))
  }

  /** Entries kept. */
  get size (): number {
    return this.#cache.size
  }

  /** Positions the entries hold, each with its buffer's slack: what they take of the budget. */
  get keptPositions (): number {
    return this.#cache.positions + this.#cache.size * SLOT_SLACK
  }

  /** Entries kept for `scope` (the shared prefix's not counted). */
  sizeOf (scope: string): number {
    let n = 0
    for (const e of this.#cache.entries()) if (e.scope === keyOf(scope)) n++
    return n
  }

  /**
   * The longest cached prefix of `tokens` that `scope` may reuse, at most `limit` positions: its
   * own entries', or the shared prefix's up to that prefix's end. Null when there is none.
   */
  lookup (scope: string, tokens: readonly number[], limit: number): PrefixMatch | null {
    const own = this.#cache.lookup(keyOf(scope), tokens, limit)
    const shared = this.#startsShared(tokens) ? this.#cache.lookup(SHARED_KEY, tokens, Math.min(limit, this.sharedIds.length)) : null
    const best = shared && shared.length > (own?.length ?? 0) ? shared : own
    if (best) this.#cache.touch(best.entry)
    return best
  }

  /** A new one-row cache holding the match's positions, for a sequence to continue from (to `least` positions: CacheLayout.gather). */
  take (match: PrefixMatch, least?: number): RowCache {
    return this.#cache.take(match, least)
  }

  /** Whether `entry` is still kept (not evicted). */
  holds (entry: PrefixEntry): boolean {
    return this.#cache.holds(entry)
  }

  /**
   * Keeps `cache` (one row, taken over) as `scope`'s cache of `tokens`, without making room for
   * running sequences; within the kept bound.
   */
  insert (scope: string, tokens: readonly number[], cache: RowCache): void {
    this.#cache.insert(keyOf(scope), tokens, cache)
    this.#trimKept()
  }

  /**
   * Keeps the first `tokens.length` positions of row `row` of `cache` as `scope`'s cache of
   * `tokens` (unless an entry of the scope holds them already), then frees the scope's own
   * entries until the `running` sequences' reservations fit again (the new one last). Where
   * `tokens` start with the shared prefix and it is not cached, its part is kept in the shared
   * scope too, if that fits beside them.
   */
  remember (scope: string, tokens: readonly number[], cache: RowCache, row: number, running: Reservation[]): void {
    // Already kept (a prompt graph's sequence keeps only its prompt, which a request of its scope
    // may have had copied while it decoded; the same prompt sent again): a copy would be the whole
    // cache again, for nothing.
    const held = tokens.length >= BLOCK ? this.#cache.lookup(keyOf(scope), tokens, tokens.length) : null
    if (held?.length === tokens.length) {
      this.#cache.touch(held.entry)
      return
    }
    this.#cache.insert(keyOf(scope), tokens, this.#layout.gather([{ cache, row, length: tokens.length }]))
    // Before this entry they fitted, so the scope's own entries make room; the fallback only guards that.
    if (!this.makeRoom(scope, running)) this.makeRoom(scope, running, { anyScope: true })
    this.keepShared(tokens, cache, row, running)
    this.#trimKept()
  }

  /**
   * Where `tokens` (row `row` of `cache`) start with the shared prefix and it is not cached, keeps
   * that part in the shared scope, if it fits beside the `running` sequences' reservations.
   */
  keepShared (tokens: readonly number[], cache: RowCache, row: number, running: Reservation[]): void {
    const shared = this.sharedIds.length
    if (this.#startsShared(tokens) && this.#cache.lookup(SHARED_KEY, this.sharedIds, shared)?.length !== shared &&
      this.#budget.fits(running.map(r => r.positions), this.keptPositions + shared + SLOT_SLACK)) {
      this.#cache.insert(SHARED_KEY, this.sharedIds, this.#layout.gather([{ cache, row, length: shared }]))
      this.#trimKept()
    }
  }

  /** Frees entries past the kept bound: the oldest of the scope keeping the most, first. */
  #trimKept (): void {
    let kept = this.keptPositions
    if (kept <= this.keptLimit) return
    const holding = new Map<string, PrefixEntry[]>()
    for (const e of [...this.#cache.entries()].sort((a, b) => a.lastUsed - b.lastUsed)) {
      const list = holding.get(e.scope) ?? []
      list.push(e)
      holding.set(e.scope, list)
    }
    const size = (list: PrefixEntry[]): number => list.reduce((n, e) => n + e.tokens.length + SLOT_SLACK, 0)
    const held = new Map([...holding].map(([scope, list]) => [scope, size(list)]))
    while (kept > this.keptLimit) {
      let most: string | undefined
      for (const [scope, n] of held) if (most === undefined || n > held.get(most)!) most = scope
      const victim = holding.get(most!)!.shift()!
      const freed = victim.tokens.length + SLOT_SLACK
      held.set(most!, held.get(most!)! - freed)
      if (holding.get(most!)!.length === 0) held.delete(most!)
      kept -= freed
      this.#cache.remove(victim)
    }
  }

  /**
   * Frees entries until `reserves` (the running sequences' and the newcomer's) fit beside what
   * stays cached, in the fair order described above, never `keep` (the entry the newcomer is
   * about to take) unless `orKeep`, and then last. With `anyScope`, entries of scopes within
   * their share may go too (least recently used first), after the others. Frees nothing and
   * returns false when that cannot make them fit.
   */
  makeRoom (scope: string, reserves: Reservation[], opts: MakeRoom = {}): boolean {
    const victims = this.#plan(keyOf(scope), reserves, opts)
    if (!victims) return false
    for (const e of victims) this.#cache.remove(e)
    return true
  }

  clear (): void {
    this.#cache.clear()
  }

  #startsShared (tokens: readonly number[]): boolean {
    const ids = this.sharedIds
    if (ids.length === 0 || tokens.length < ids.length) return false
    for (let i = 0; i < ids.length; i++) if (tokens[i] !== ids[i]) return false
    return true
  }

  /** The entries to free, in order, so that `reserves` fit; null when the rules allow no such set. */
  #plan (key: string, reserves: Reservation[], opts: MakeRoom): PrefixEntry[] | null {
    const positions = reserves.map(r => r.positions)
    let kept = this.keptPositions
    if (this.#budget.fits(positions, kept)) return []
    const holding = new Map<string, number>()
    const add = (scope: string, n: number): void => { holding.set(scope, (holding.get(scope) ?? 0) + n) }
    for (const r of reserves) add(keyOf(r.scope), r.positions)
    // Oldest first.
    const left = [...this.#cache.entries()].sort((a, b) => a.lastUsed - b.lastUsed)
    for (const e of left) add(e.scope, e.tokens.length + SLOT_SLACK)
    const victims: PrefixEntry[] = []
    while (!this.#budget.fits(positions, kept)) {
      const candidates = left.filter(e => e !== opts.keep)
      const victim = candidates.find(e => e.scope === key) ??
        this.#overShare(candidates, holding) ??
        (opts.anyScope ? candidates[0] : undefined) ??
        (opts.orKeep && opts.keep && left.includes(opts.keep) ? opts.keep : undefined)
      if (!victim) return null
      left.splice(left.indexOf(victim), 1)
      add(victim.scope, -(victim.tokens.length + SLOT_SLACK))
      kept -= victim.tokens.length + SLOT_SLACK
      victims.push(victim)
    }
    return victims
  }

  /** The oldest entry of the scope holding the most, when that scope holds more than its fair share. */
  #overShare (candidates: PrefixEntry[], holding: Map<string, number>): PrefixEntry | undefined {
    const scopes = [...holding.values()].filter(n => n > 0).length
    const share = this.#budget.tokens / Math.max(1, scopes)
    let most: string | undefined
    for (const e of candidates) {
      const h = holding.get(e.scope) ?? 0
      if (h > share && (most === undefined || h > (holding.get(most) ?? 0))) most = e.scope
    }
    return most === undefined ? undefined : candidates.find(e => e.scope === most)
  }
}
