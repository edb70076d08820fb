// The sequences that decode together, one batched session.run per step, and
// their shared key/value cache. Rows may hold different numbers of positions;
// the cache layout (kv-cache.ts) masks each row's padding, so each row
// computes what it would alone.
//
// The cache is regathered (one copy) only when rows join or leave; between
// those events each step updates it in place or replaces it with its output.
import type { CacheLayout, RowCache } from './kv-cache.ts'
import type { Sequence } from './sequence.ts'

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

  /** Adds a sequence whose prompt is in its own single-row cache; the batch takes that cache over. */
  join (seq: Sequence): void {
    if (!seq.cache) throw new Error('a sequence joins a batch after its prefill')
    const own = seq.cache
    const old = this.cache
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

  /** One decode step: every row's pending token in, logits [rows, vocab] out. */
  async step (): Promise<Float32Array> {
    const { logits, cache } = await this.#layout.run(this.cache as RowCache, this.rows.map(r => r.pending), 1)
    this.cache = cache
    for (const row of this.rows) row.cachedTokens += 1
    return logits
  }
}
