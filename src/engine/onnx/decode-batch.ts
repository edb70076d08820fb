// The sequences that decode together, one batched session.run per step, and
// their shared key/value cache. Rows are left-padded to the longest row: row
// b holds `pad[b]` empty positions, masked out, then its real tokens. The
// standard attention graph honours such a mask exactly, so each row computes
// what it would alone.
//
// The cache is rebuilt (one copy) only when rows join or leave; between those
// events each step's `present` output simply becomes the next step's past.
import { DecoderSession, type ForwardInput, type KvCache } from './decoder-session.ts'
import { ort, type OrtTensor } from './ort.ts'
import type { Sequence } from './sequence.ts'

type CacheData = Float32Array | Uint16Array

export class DecodeBatch {
  readonly capacity: number
  private readonly session: DecoderSession
  /** Sequences in row order. Each one's `cachedTokens` says how many of the row's positions are real. */
  rows: Sequence[] = []
  cache: KvCache | null = null

  constructor (session: DecoderSession, capacity: number) {
    this.session = session
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
    const sources = this.rows.map((row, b) => ({ cache: this.cache as KvCache, row: b, len: row.cachedTokens }))
    sources.push({ cache: seq.cache, row: 0, len: seq.cachedTokens })
    const rebuilt = this.rebuild(sources)
    this.release(this.cache)
    this.release(seq.cache)
    seq.cache = null
    this.cache = rebuilt
    this.rows.push(seq)
  }

  /** Drops sequences (finished or cancelled) and trims padding no remaining row needs. */
  leave (gone: Set<Sequence>): void {
    if (gone.size === 0) return
    const keep = this.rows.filter(r => !gone.has(r))
    const old = this.cache
    this.cache = keep.length === 0 || !old
      ? null
      : this.rebuild(keep.map(r => ({ cache: old, row: this.rows.indexOf(r), len: r.cachedTokens })))
    this.release(old)
    this.rows = keep
  }

  /** The feeds of one decode step: every row's pending token at its own position. */
  stepInput (): ForwardInput {
    const cache = this.cache as KvCache
    const total = cache.length
    return {
      batch: this.rows.length,
      inputIds: this.rows.map(r => r.pending),
      attentionMask: this.rows.map(r => {
        const mask = new Array(total + 1).fill(1)
        mask.fill(0, 0, total - r.cachedTokens)
        return mask
      }),
      positionIds: this.rows.map(r => [r.cachedTokens]),
      past: cache,
      logitsToKeep: 1,
    }
  }

  /** Takes a step's output cache as the batch's own. */
  advance (present: KvCache): void {
    this.release(this.cache)
    this.cache = present
    for (const row of this.rows) row.cachedTokens += 1
  }

  /**
   * Builds a cache holding the given rows right-aligned to the longest one:
   * each row keeps its last `len` positions, preceded by zero padding.
   */
  private rebuild (sources: Array<{ cache: KvCache; row: number; len: number }>): KvCache {
    const model = this.session.model
    const heads = model.numKvHeads
    const dim = model.headDim
    const length = Math.max(...sources.map(s => s.len))
    const tensors: Record<string, OrtTensor> = {}
    for (const name of Object.keys(sources[0].cache.tensors)) {
      const first = sources[0].cache.tensors[name]
      const out: CacheData = first.type === 'float16'
        ? new Uint16Array(sources.length * heads * length * dim)
        : new Float32Array(sources.length * heads * length * dim)
      sources.forEach((src, b) => {
        const tensor = src.cache.tensors[name]
        const data = tensor.data as CacheData
        const srcLength = tensor.dims[2]
        for (let h = 0; h < heads; h++) {
          const from = ((src.row * heads + h) * srcLength + (srcLength - src.len)) * dim
          const to = ((b * heads + h) * length + (length - src.len)) * dim
          out.set(data.subarray(from, from + src.len * dim), to)
        }
      })
      tensors[name] = new ort.Tensor(first.type as 'float32' | 'float16', out, [sources.length, heads, length, dim])
    }
    return { tensors, length }
  }

  private release (cache: KvCache | null): void {
    if (cache) DecoderSession.disposeCache(cache)
  }
}
