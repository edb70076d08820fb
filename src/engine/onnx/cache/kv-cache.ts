// The key/value cache between runs, for a batch of rows that may hold
// different numbers of positions, in the layout each kind of graph needs
// (decoder-session.ts tells them apart):
//
// concat graphs return the whole cache every run. Rows are right-aligned to
// the longest one (left padding, masked out); each run's output simply becomes
// the next run's past. On WebGPU, where that output stays in GPU memory, the
// device layout keeps it there (device-cache.ts).
//
// append graphs return only the new positions. The cache lives in host
// buffers with room to spare (slot-buffers.ts): each run's new entries are
// written into the next free slots, and the buffers go back in as the past
// without a copy, the unused slots masked out.
//
// Either way, callers hand over token ids and get logits; masks and position
// ids follow from the rows' lengths.
import type { CapturedStep } from '../device/captured-step.ts'
import { DecoderSession, maskRow, type KvCache } from '../device/decoder-session.ts'
import { ort, type OrtTensor } from '../device/ort.ts'
import { alignedRun, type CacheLayout, type CacheRoom, type CacheRun, type RowCache } from './cache-layout.ts'
import { DeviceLayout } from './device-cache.ts'
import { type CacheData, SlotBuffers, type Slots, type SpareLimits } from './slot-buffers.ts'

export type { CacheLayout, CacheRoom, CacheRun, RowCache }
export { CAPACITY_STEP } from './slot-buffers.ts'

/**
 * The layout for `session`'s graph; on WebGPU with `captured`, a row decoding alone steps on it.
 * `spare`: freed host buffers kept for reuse (SlotBuffers), for the layouts that have them.
 */
export function cacheLayoutFor (session: DecoderSession, captured: CapturedStep | null = null, spare?: SpareLimits): CacheLayout {
  if (session.cacheOnDevice) return new DeviceLayout(session, captured, spare)
  return session.cacheOutputs === 'append' ? new AppendLayout(session, spare) : new ConcatLayout(session)
}

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

  get padsFirstRun (): boolean {
    return this.#session.takesPaddedRows
  }

  async run (rowCache: RowCache, tokens: number[][], logitsToKeep: number, prompt = false): Promise<CacheRun> {
    const cache = rowCache as ConcatCache
    const { inputIds, attentionMask, positionIds, counts } = alignedRun(cache.lengths, cache.kv.length, tokens, this.padsFirstRun)
    const out = await this.#session.forward({
      batch: tokens.length,
      inputIds,
      attentionMask,
      positionIds,
      past: cache.kv,
      logitsToKeep,
      prompt,
    })
    this.bytesHeld += kvBytes(out.present) - kvBytes(cache.kv)
    DecoderSession.disposeCache(cache.kv)
    const next: ConcatCache = { kv: out.present, lengths: cache.lengths.map((len, b) => len + counts[b]) }
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

  /** Held on the host as it is. */
  settle (cache: RowCache): RowCache {
    return cache
  }
}

class AppendLayout implements CacheLayout {
  readonly #session: DecoderSession
  readonly #names: string[]
  readonly #slots: SlotBuffers

  constructor (session: DecoderSession, spare?: SpareLimits) {
    this.#session = session
    this.#names = Object.keys(session.emptyCache(1).tensors)
    this.#slots = new SlotBuffers(this.#names, { heads: session.model.numKvHeads, dim: session.model.headDim, type: session.cacheType }, spare)
  }

  get packsRows (): boolean {
    return this.#session.packsRows
  }

  /** Rows of different lengths are packed instead (packsRows), padded after their tokens. */
  readonly padsFirstRun = false

  get bytesHeld (): number {
    return this.#slots.bytesHeld
  }

  empty (rows = 1): Slots {
    return this.#slots.allocate(new Array(rows).fill(0), 0)
  }

  async run (rowCache: RowCache, tokens: number[][], logitsToKeep: number, prompt = false, room?: CacheRoom): Promise<CacheRun> {
    const cache = rowCache as Slots
    // Rows shorter than the longest are padded after their real tokens (graphs that pack rows).
    const counts = tokens.map(t => t.length)
    const seqLen = Math.max(...counts)
    const rows = tokens.length
    const needed = Math.max(...cache.lengths.map((len, b) => len + counts[b]))
    // Room for this run's entries first, so nothing is reallocated after the run. Not for the
    // prompt's end at once (room.least): the graph's attention spans the whole capacity, so a
    // chunk of a long prompt would attend over all of its positions (an 8k agent prompt on the
    // CPU: 108 s to its first token against 85).
    const target = needed > cache.capacity ? this.#slots.grown(cache, needed, room && { most: room.most }) : cache
    const heads = this.#session.model.numKvHeads
    const dim = this.#session.model.headDim
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
        attentionMask: target.lengths.map(len => maskRow(capacity + seqLen, len, capacity)),
        positionIds: target.lengths.map(len => Array.from({ length: seqLen }, (_, k) => len + k)),
        past,
        logitsToKeep,
        prompt,
      })
    } catch (err) {
      if (target !== cache) this.#slots.free(target)
      throw err
    }
    if (target !== cache) this.#slots.free(cache)
    this.#slots.write(target, name => out.present.tensors[name].data as CacheData, counts, seqLen)
    DecoderSession.disposeCache(out.present)
    return { logits: out.logits, cache: target }
  }

  /** No room ahead (`least`): this graph's attention spans the cache's whole room (run's comment). */
  gather (rows: Array<{ cache: RowCache; row: number; length?: number }>): Slots {
    return this.#slots.gather(rows.map(r => ({ slots: r.cache as Slots, row: r.row, length: Math.min(r.length ?? Infinity, r.cache.lengths[r.row]) })))
  }

  free (rowCache: RowCache): void {
    this.#slots.free(rowCache as Slots)
  }

  /** Held on the host as it is. */
  settle (cache: RowCache): RowCache {
    return cache
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
