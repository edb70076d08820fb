// Prompts being fed together: one batched run per chunk, every row taking the
// same number of its own prompt's tokens, until each prompt is in. Requests
// that arrive together (a burst, several users at once) are prefilled in one
// run per chunk instead of one after another, so none of them starts decoding
// alone while the others still wait for their first token: they then share
// every decode step from the first one.
//
// A row whose prompt is complete leaves with a cache of its own (one copy; a
// group of one hands its cache over as it is, kept in GPU memory where the
// layout keeps it there), which a DecodeBatch then takes over.
//
// Graphs that cannot batch prompt chunks on a past (gqa-masked) take a group
// in whole mode: fresh prompts, each fed whole in one run, the shorter
// left-padded (the cache layout's padsFirstRun).
import type { CacheLayout, CacheRoom, RowCache } from '../cache/kv-cache.ts'
import { roomFor, type Sequence } from './sequence.ts'

/**
 * Positions of a reply a prompt's cache makes room for beside the prompt (at most the reply's
 * max_tokens). Without them the cache, sized to the prompt's end, would grow (a new allocation and
 * a copy of the whole cache: ~1 s into fresh memory for an agent's 8k prompt of the 1.5B) a few
 * dozen tokens into every reply; with them only a reply longer than this grows, once. A cache kept
 * in GPU memory computes attention over its rows' lengths, not its room, so the room costs memory
 * alone, which the reservation already holds.
 */
export const REPLY_ROOM = 1024

/** The positions a prompt's cache makes room for at once: the prompt, and its reply up to REPLY_ROOM. */
export function promptRoom (seq: Pick<Sequence, 'promptIds' | 'maxNewTokens'>): number {
  return seq.promptIds.length + Math.min(seq.maxNewTokens, REPLY_ROOM)
}

export class PrefillGroup {
  readonly #layout: CacheLayout
  /** Sequences in row order. */
  rows: Sequence[]
  /** The rows' shared cache; null once every row has left. */
  #cache: RowCache | null

  /** One run of whole prompts (see above). */
  readonly whole: boolean
  /** False: on a past, several rows take one token each a run, never more (gqa-masked graphs). */
  readonly #batchesChunks: boolean

  /** Rows may bring a cache of their own (a reused prefix, in `seq.cache`); the group takes it over. */
  constructor (layout: CacheLayout, rows: Sequence[], opts: { whole?: boolean; batchesChunks?: boolean } = {}) {
    this.#layout = layout
    this.rows = rows
    // Whole mode needs fresh prompts and a layout that pads a first run; otherwise the group feeds
    // chunks (one token a row on a past where chunks do not batch: slower, never wrong).
    this.whole = opts.whole === true && layout.padsFirstRun && rows.every(r => !r.cache && r.cachedTokens === 0)
    this.#batchesChunks = opts.batchesChunks ?? true
    if (rows.every(r => !r.cache)) {
      this.#cache = layout.empty(rows.length)
      return
    }
    if (rows.length === 1) {
      // A prompt alone on its reused prefix: the group takes that cache over, no copy (a long
      // prefix's cache is hundreds of megabytes).
      this.#cache = rows[0].cache
      rows[0].cache = null
      return
    }
    const own = rows.map(r => r.cache ?? layout.empty(1))
    this.#cache = layout.gather(own.map(cache => ({ cache, row: 0 })))
    for (const cache of own) layout.free(cache)
    for (const r of rows) r.cache = null
  }

  get size (): number {
    return this.rows.length
  }

  /** The rows' reservations, and the positions their prompts and replies bring them to (REPLY_ROOM): a growth makes room for the whole prompt at once. */
  #room (): CacheRoom {
    return { most: roomFor(this.rows), least: Math.max(...this.rows.map(promptRoom)) }
  }

  /**
   * Feeds up to `perRow` prompt tokens to every row (fewer when a prompt has fewer left, so all
   * rows take the same count; in whole mode, every row's whole prompt) and returns the logits of
   * each row's last position, [rows, vocab].
   */
  async feed (perRow: number): Promise<{ logits: Float32Array; tokens: number }> {
    if (this.whole) {
      const prompts = this.rows.map(r => r.nextPromptChunk(r.promptIds.length))
      const out = await this.#layout.run(this.#cache as RowCache, prompts, 1, true, this.#room())
      this.#cache = out.cache
      this.rows.forEach((row, b) => { row.cachedTokens += prompts[b].length })
      return { logits: out.logits, tokens: prompts.reduce((sum, p) => sum + p.length, 0) }
    }
    const remaining = Math.min(...this.rows.map(r => r.promptIds.length - r.cachedTokens))
    const onPast = this.rows.length > 1 && Math.max(...(this.#cache as RowCache).lengths) > 0
    const count = !this.#batchesChunks && onPast ? 1 : Math.max(1, Math.min(perRow, remaining))
    const out = await this.#layout.run(this.#cache as RowCache, this.rows.map(r => r.nextPromptChunk(count)), 1, true, this.#room())
    this.#cache = out.cache
    for (const row of this.rows) row.cachedTokens += count
    return { logits: out.logits, tokens: count * this.rows.length }
  }

  /** Takes the given rows out: each leaves with its own single-row cache (in `seq.cache`) unless `discard`. */
  remove (leaving: Set<Sequence>, discard = false): void {
    if (leaving.size === 0) return
    const old = this.#cache as RowCache
    if (this.rows.length === 1 && leaving.has(this.rows[0])) {
      // The last row takes the group's cache as it is (its spare capacity is within its reservation).
      if (discard) this.#layout.free(old)
      else this.rows[0].cache = old
      this.#cache = null
      this.rows = []
      return
    }
    if (!discard) {
      this.rows.forEach((seq, row) => {
        if (leaving.has(seq)) seq.cache = this.#layout.gather([{ cache: old, row }])
      })
    }
    const keep = this.rows.map((seq, row) => ({ seq, row })).filter(r => !leaving.has(r.seq))
    this.#cache = keep.length > 0 ? this.#layout.gather(keep.map(r => ({ cache: old, row: r.row }))) : null
    this.#layout.free(old)
    this.rows = keep.map(r => r.seq)
  }

  /** Frees the group's cache (the group failed); a group whose rows all left has nothing to free. */
  free (): void {
    if (this.#cache) this.#layout.free(this.#cache)
    this.#cache = null
    this.rows = []
  }
}
