// The sequences that decode together, one batched session.run per step, and
// their shared key/value cache. Rows may hold different numbers of positions;
// the cache layout (kv-cache.ts) masks each row's padding, so each row
// computes what it would alone.
//
// The cache is regathered (one copy) only when rows join or leave; between
// those events each step updates it in place or replaces it with its output.
//
// With a graph that packs rows (kv-cache.ts `packsRows`), a row may join
// before its prompt is in: each step then feeds it a chunk of its prompt
// beside the others' one token each (mixed batches: one pass over the
// weights for both, where a separate prompt run would take another).
import type { CacheLayout, RowCache } from '../cache/kv-cache.ts'
import { roomFor, type Sequence } from './sequence.ts'

export class DecodeBatch {
  readonly capacity: number
  readonly #layout: CacheLayout
  /** Sequences in row order. */
  rows: Sequence[] = []
  cache: RowCache | null = null

  constructor (layout: CacheLayout, capacity: number) {
    this.#layout = layout
    this.capacity = capacity
  }

  get size (): number {
    return this.rows.length
  }

  get hasRoom (): boolean {
    return this.rows.length < this.capacity
  }

  /**
   * Adds a sequence whose prompt is in its own single-row cache; the batch takes that cache over.
   * With a layout that packs rows, a sequence may also join with its prompt still to feed (from
   * its cached prefix, in `seq.cache`, or from nothing).
   */
  join (seq: Sequence): void {
    if (!seq.cache && !(seq.prefilling && this.#layout.packsRows)) throw new Error('a sequence joins a batch after its prefill')
    const own = seq.cache ?? this.#layout.empty(1)
    const old = this.cache
    if (!old) {
      // The first row: its cache becomes the batch's as it is, no copy.
      this.cache = own
      seq.cache = null
      this.rows.push(seq)
      return
    }
    const sources = this.rows.map((_, b) => ({ cache: old as RowCache, row: b }))
    sources.push({ cache: own, row: 0 })
    this.cache = this.#layout.gather(sources)
    if (old) this.#layout.free(old)
    this.#layout.free(own)
    seq.cache = null
    this.rows.push(seq)
  }

  /** Drops sequences (finished or cancelled) and the padding no remaining row needs. */
  leave (gone: Set<Sequence>): void {
    if (gone.size === 0) return
    const keep = this.rows.filter(r => !gone.has(r))
    const old = this.cache
    this.cache = keep.length === 0 || !old
      ? null
      : this.#layout.gather(keep.map(r => ({ cache: old, row: this.rows.indexOf(r) })))
    if (old) this.#layout.free(old)
    this.rows = keep
  }

  /** Rows whose prompts are still being fed. */
  get prefilling (): Sequence[] {
    return this.rows.filter(r => r.prefilling)
  }

  /**
   * One step: every decoding row's pending token in, and up to `promptChunk` (at least one) prompt tokens of each
   * row still prefilling; logits [rows, vocab] out (each row's last token's), and how many prompt
   * tokens went in.
   */
  async step (promptChunk = 0): Promise<{ logits: Float32Array; promptTokens: number }> {
    const feeds = this.rows.map(r => r.prefilling ? r.nextPromptChunk(Math.max(1, promptChunk)) : r.pending)
    // Never a prompt-graph run: rows join before their prompts are in only without a prompt graph (mixed batches).
    const { logits, cache } = await this.#layout.run(this.cache as RowCache, feeds, 1, false, { most: roomFor(this.rows) })
    this.cache = cache
    let promptTokens = 0
    this.rows.forEach((row, b) => {
      if (row.prefilling) promptTokens += feeds[b].length
      row.cachedTokens += feeds[b].length
    })
    return { logits, promptTokens }
  }
}
