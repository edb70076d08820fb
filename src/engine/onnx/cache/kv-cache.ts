// The key/value cache between runs, for a batch of rows that may hold
// different numbers of positions, in the layout each kind of graph needs
// (decoder-session.ts tells them apart):
//
// concat graphs return the whole cache every run. Rows are right-aligned to
// the longest one (left padding, masked out); each run's output simply becomes
// the next run's past.
//
// append graphs return only the new positions. The cache lives in buffers of
// [rows, kv heads, capacity, head_dim] that this module owns: row b's
// positions fill slots 0..len-1 (right padding, masked out), each run's new
// entries are written into the next free slots, and the buffers go back in as
// the past without a copy. Capacity grows in steps of CAPACITY_STEP slots, so
// a decode step almost never reallocates.
//
// Either way, callers hand over token ids and get logits; masks and position
// ids follow from the rows' lengths.
import { DecoderSession, type KvCache } from '../device/decoder-session.ts'
import { freeTensor, ort, type OrtTensor } from '../device/ort.ts'

type CacheData = Float32Array | Uint16Array

/** A batch's cached keys and values. */
export interface RowCache {
  /** Positions each row holds. */
  readonly lengths: readonly number[]
}

export interface CacheRun {
  /** Float32 logits of the kept positions, [rows, kept, vocab]. */
  logits: Float32Array
  /** The cache after the run; the cache passed in must not be used again. */
  cache: RowCache
}

export interface CacheLayout {
  /** `rows` rows (default one) holding nothing. */
  empty (rows?: number): RowCache
  /**
   * Feeds `tokens[b]` to row b and returns the logits of the last `logitsToKeep` positions. Rows
   * take the same count of tokens unless `packsRows`; then they may differ, and the logits are
   * each row's last token's (`logitsToKeep` 1). When it throws, the cache passed in is unchanged
   * and still the caller's. `prompt`: every token is a prompt token (DecoderSession's prompt graph).
   */
  run (cache: RowCache, tokens: number[][], logitsToKeep: number, prompt?: boolean): Promise<CacheRun>
  /** Whether rows of one run may take different numbers of tokens (graphs with tokens_per_row). */
  readonly packsRows: boolean
  /**
   * A new cache holding the given rows, in order; the sources are left as they were. With
   * `length`, a row keeps only its first `length` positions (a cached prefix).
   */
  gather (rows: Array<{ cache: RowCache; row: number; length?: number }>): RowCache
  /** Frees a cache's memory now. */
  free (cache: RowCache): void
  /** Bytes of the caches this layout has handed out and not yet freed. */
  readonly bytesHeld: number
}

export function cacheLayoutFor (session: DecoderSession): CacheLayout {
  return session.cacheOutputs === 'append' ? new AppendLayout(session) : new ConcatLayout(session)
}

/** Slots added at a time when an append cache grows. */
export const CAPACITY_STEP = 64

interface ConcatCache extends RowCache {
  kv: KvCache
  lengths: number[]
}

class ConcatLayout implements CacheLayout {
  readonly #session: DecoderSession
  bytesHeld = 0

  constructor (session: DecoderSession) {
    this.#session = session
  }

  get packsRows (): boolean {
    return this.#session.packsRows
  }

  empty (rows = 1): ConcatCache {
    return { kv: this.#session.emptyCache(rows), lengths: new Array(rows).fill(0) }
  }

  async run (rowCache: RowCache, tokens: number[][], logitsToKeep: number, prompt = false): Promise<CacheRun> {
    const cache = rowCache as ConcatCache
    const total = cache.kv.length
    const seqLen = tokens[0].length
    const out = await this.#session.forward({
      batch: tokens.length,
      inputIds: tokens,
      // Rows of different lengths: the session refuses them (this layout's graphs do not pack rows).
      tokensPerRow: tokens.map(t => t.length),
      attentionMask: cache.lengths.map(len => {
        const mask = new Array(total + seqLen).fill(1)
        return mask.fill(0, 0, total - len)
      }),
      positionIds: cache.lengths.map(len => tokens[0].map((_, k) => len + k)),
      past: cache.kv,
      logitsToKeep,
      prompt,
    })
    this.bytesHeld += kvBytes(out.present) - kvBytes(cache.kv)
    DecoderSession.disposeCache(cache.kv)
    const next: ConcatCache = { kv: out.present, lengths: cache.lengths.map(len => len + seqLen) }
    return { logits: out.logits, cache: next }
  }

  gather (rows: Array<{ cache: RowCache; row: number; length?: number }>): ConcatCache {
    const model = this.#session.model
    const heads = model.numKvHeads
    const dim = model.headDim
    // `held`: the positions the source row holds; `len`: the first of them this row keeps.
    const sources = rows.map(r => ({ cache: r.cache as ConcatCache, row: r.row, held: r.cache.lengths[r.row], len: Math.min(r.length ?? Infinity, r.cache.lengths[r.row]) }))
    const length = Math.max(...sources.map(s => s.len))
    const tensors: Record<string, OrtTensor> = {}
    for (const name of Object.keys(sources[0].cache.kv.tensors)) {
      const out = newCacheData(this.#session, sources.length * heads * length * dim)
      sources.forEach((src, b) => {
        const tensor = src.cache.kv.tensors[name]
        const data = tensor.data as CacheData
        const srcLength = tensor.dims[2]
        for (let h = 0; h < heads; h++) {
          // Right-aligned: a row's positions are the last `held` of its source row, and the last `len` of the new one.
          const from = ((src.row * heads + h) * srcLength + (srcLength - src.held)) * dim
          const to = ((b * heads + h) * length + (length - src.len)) * dim
          out.set(data.subarray(from, from + src.len * dim), to)
        }
      })
      tensors[name] = new ort.Tensor(this.#session.cacheType, out, [sources.length, heads, length, dim])
    }
    const gathered = { kv: { tensors, length }, lengths: sources.map(s => s.len) }
    this.bytesHeld += kvBytes(gathered.kv)
    return gathered
  }

  free (cache: RowCache): void {
    const { kv } = cache as ConcatCache
    this.bytesHeld -= kvBytes(kv)
    DecoderSession.disposeCache(kv)
  }
}

interface AppendCache extends RowCache {
  lengths: number[]
  capacity: number
  /** One buffer per past_key_values.N.* input, [rows, kv heads, capacity, head_dim]. */
  buffers: Record<string, CacheData>
}

class AppendLayout implements CacheLayout {
  readonly #session: DecoderSession
  readonly #names: string[]
  bytesHeld = 0

  constructor (session: DecoderSession) {
    this.#session = session
    this.#names = Object.keys(session.emptyCache(1).tensors)
  }

  get packsRows (): boolean {
    return this.#session.packsRows
  }

  empty (rows = 1): AppendCache {
    return this.#allocate(new Array(rows).fill(0), 0)
  }

  async run (rowCache: RowCache, tokens: number[][], logitsToKeep: number, prompt = false): Promise<CacheRun> {
    const cache = rowCache as AppendCache
    // Rows shorter than the longest are padded after their real tokens (graphs that pack rows).
    const counts = tokens.map(t => t.length)
    const seqLen = Math.max(...counts)
    const rows = tokens.length
    const needed = Math.max(...cache.lengths.map((len, b) => len + counts[b]))
    // Room for this run's entries first, so nothing is reallocated after the run.
    const target = needed > cache.capacity ? this.#grown(cache, needed) : cache
    const { heads, dim } = this.#shape()
    const capacity = target.capacity
    const past: KvCache = { tensors: {}, length: capacity }
    for (const name of this.#names) {
      past.tensors[name] = new ort.Tensor(this.#session.cacheType, target.buffers[name], [rows, heads, capacity, dim])
    }
    // Rows of different lengths go in padded; the session refuses them unless its graph packs rows.
    const ragged = counts.some(n => n !== seqLen)
    let out
    try {
      out = await this.#session.forward({
        batch: rows,
        inputIds: ragged ? tokens.map(t => t.length === seqLen ? t : [...t, ...new Array(seqLen - t.length).fill(0)]) : tokens,
        ...(ragged ? { tokensPerRow: counts } : {}),
        // Slots 0..len-1 are the row's past, the rest of the buffer is empty; then this run's positions.
        attentionMask: target.lengths.map(len => {
          const mask = new Array(capacity + seqLen).fill(0)
          mask.fill(1, 0, len)
          return mask.fill(1, capacity)
        }),
        positionIds: target.lengths.map(len => Array.from({ length: seqLen }, (_, k) => len + k)),
        past,
        logitsToKeep,
        prompt,
      })
    } catch (err) {
      if (target !== cache) this.free(target)
      throw err
    }
    if (target !== cache) this.free(cache)
    for (const name of this.#names) {
      const entries = out.present.tensors[name]
      const data = entries.data as CacheData
      const buffer = target.buffers[name]
      for (let b = 0; b < rows; b++) {
        // A row's real entries only: its padding's keys and values are never kept.
        for (let h = 0; h < heads; h++) {
          const from = (b * heads + h) * seqLen * dim
          buffer.set(data.subarray(from, from + counts[b] * dim), ((b * heads + h) * capacity + target.lengths[b]) * dim)
        }
      }
      freeTensor(entries)
    }
    target.lengths = target.lengths.map((len, b) => len + counts[b])
    return { logits: out.logits, cache: target }
  }

  gather (rows: Array<{ cache: RowCache; row: number; length?: number }>): AppendCache {
    const lengths = rows.map(r => Math.min(r.length ?? Infinity, r.cache.lengths[r.row]))
    // One free slot at least: the next decode step fits without growing.
    const out = this.#allocate(lengths, roundUp(Math.max(...lengths) + 1, CAPACITY_STEP))
    this.#copyRows(rows.map((r, b) => ({ cache: r.cache as AppendCache, row: r.row, length: lengths[b] })), out)
    return out
  }

  free (rowCache: RowCache): void {
    const cache = rowCache as AppendCache
    for (const name of this.#names) {
      // The buffers are this module's own, never shared with a tensor that outlives the run.
      const buffer = cache.buffers[name].buffer
      if (buffer instanceof ArrayBuffer && !buffer.detached) {
        this.bytesHeld -= buffer.byteLength
        buffer.transfer(0)
      }
    }
  }

  #shape (): { heads: number; dim: number } {
    return { heads: this.#session.model.numKvHeads, dim: this.#session.model.headDim }
  }

  #allocate (lengths: number[], capacity: number): AppendCache {
    const { heads, dim } = this.#shape()
    const buffers: Record<string, CacheData> = {}
    for (const name of this.#names) {
      buffers[name] = newCacheData(this.#session, lengths.length * heads * capacity * dim)
      this.bytesHeld += buffers[name].byteLength
    }
    return { lengths: [...lengths], capacity, buffers }
  }

  /** The same rows in a larger buffer with room for `needed` positions. */
  #grown (cache: AppendCache, needed: number): AppendCache {
    const out = this.#allocate(cache.lengths, roundUp(needed, CAPACITY_STEP))
    this.#copyRows(cache.lengths.map((length, row) => ({ cache, row, length })), out)
    return out
  }

  /** Copies each source row's first `length` positions into row b of `into` (right padding). */
  #copyRows (sources: Array<{ cache: AppendCache; row: number; length: number }>, into: AppendCache): void {
    const { heads, dim } = this.#shape()
    for (const name of this.#names) {
      const to = into.buffers[name]
      sources.forEach((src, b) => {
        const from = src.cache.buffers[name]
        const len = src.length
        for (let h = 0; h < heads; h++) {
          const start = (src.row * heads + h) * src.cache.capacity * dim
          to.set(from.subarray(start, start + len * dim), (b * heads + h) * into.capacity * dim)
        }
      })
    }
  }
}

/** Bytes of a cache's tensors (still attached). */
function kvBytes (kv: KvCache): number {
  let bytes = 0
  for (const t of Object.values(kv.tensors)) bytes += (t.data as CacheData).byteLength
  return bytes
}

function newCacheData (session: DecoderSession, size: number): CacheData {
  return session.cacheType === 'float16' ? new Uint16Array(size) : new Float32Array(size)
}

function roundUp (n: number, step: number): number {
  return Math.ceil(n / step) * step
}
