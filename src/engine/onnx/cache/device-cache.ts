// A key/value cache that lives in GPU memory between runs (DecoderSession's
// cacheOnDevice: WebGPU with a concat graph that returns cache_delta).
//
// Each run's present.N.* stay on the GPU and go back in as the next run's past
// as they are (rows right-aligned to the longest, left padding masked out, as
// the concat layout does on the host): no step uploads the cache. The host
// keeps its own copy in slot buffers (slot-buffers.ts), written from each run's
// cache_delta, which is a few kilobytes a token. onnxruntime-node cannot read a
// GPU buffer back, and the scheduler's gathers (rows joining or leaving a
// batch, the prefix cache's copies) are the host's work: they read the host's
// copy, and the cache they make is uploaded once, by the run that first uses it.
//
// gqa-masked graphs keep the cache in place (DecoderSession.cacheInPlace): the GPU
// holds one buffer per layer's keys and values with room for more positions, and
// each run writes its positions into it (no new buffers, no copy of the whole
// cache every run). A buffer is made from the host's copy when there is no GPU
// one, and made bigger (in GPU memory) when a run would not fit, its room doubling
// up to the rows' reservation (what admission counted against the KV budget).
//
// With a capture step (CapturedStep, ONNX_WEBGPU_CAPTURE), a run of one token a row,
// of no more rows than the step's slots, whose rows fit the step's buffers, takes its
// step there: recorded once and replayed, without the host's dispatch of every kernel.
// The step's slots hold rows by key (each row's `keys` entry names its exact contents:
// a new one after every run, the same one in an exact copy); a step whose rows are not
// all held loads them from the host's copy, and its cache_delta keeps the host's copy
// as every run does. The cache's own GPU buffers, now behind, are let go (a later run
// elsewhere makes them again from the host's copy).
import type { CapturedStep } from '../device/captured-step.ts'
import { DecoderSession, type KvCache } from '../device/decoder-session.ts'
import { ort, type OrtTensor } from '../device/ort.ts'
import { alignedRun, type CacheLayout, type CacheRoom, type CacheRun, grownRoom, type RowCache } from './cache-layout.ts'
import { type CacheData, SlotBuffers, type Slots, type SpareLimits } from './slot-buffers.ts'

interface DeviceCache extends Slots {
  /**
   * Each row's key: an object naming its exact contents (new after every run; a gather's exact
   * copy of a row keeps it), by which the capture step's slots know the rows they hold.
   */
  keys: object[]
  /**
   * The last run's present.N.* in GPU memory, rows right-aligned to its length; null when only
   * the host's copy holds the cache (a fresh or gathered cache, before its first run).
   */
  device: KvCache | null
}

export class DeviceLayout implements CacheLayout {
  readonly #session: DecoderSession
  readonly #names: string[]
  readonly #slots: SlotBuffers
  /** Bytes of GPU memory the caches' present tensors hold. */
  #deviceBytes = 0
  readonly #captured: CapturedStep | null
  /** Tokens decoded on the capture step (a step of n rows: n). */
  replayedTokens = 0

  constructor (session: DecoderSession, captured: CapturedStep | null = null, spare?: SpareLimits) {
    this.#session = session
    this.#captured = captured
    this.#names = Object.keys(session.emptyCache(1).tensors)
    this.#slots = new SlotBuffers(this.#names, { heads: session.model.numKvHeads, dim: session.model.headDim, type: session.cacheType }, spare)
  }

  readonly packsRows = false

  get padsFirstRun (): boolean {
    return this.#session.takesPaddedRows
  }

  /** The host's copies and the GPU's (not the capture step's buffers, which no cache owns: CapturedStep.cacheBytes). */
  get bytesHeld (): number {
    return this.#slots.bytesHeld + this.#deviceBytes
  }

  empty (rows = 1): DeviceCache {
    return { ...this.#slots.allocate(new Array(rows).fill(0), 0), device: null, keys: newKeys(rows) }
  }

  async run (rowCache: RowCache, tokens: number[][], logitsToKeep: number, prompt = false, room?: CacheRoom): Promise<CacheRun> {
    const cache = rowCache as DeviceCache
    const captured = this.#captured
    if (captured && !prompt && tokens.length <= captured.rows && tokens.every(t => t.length === 1) && cache.lengths.every(len => len < captured.length)) {
      return this.#capturedRun(captured, cache, tokens.map(t => t[0]), room)
    }
    const pastLength = cache.device?.length ?? Math.max(...cache.lengths)
    const { inputIds, attentionMask, positionIds, counts, seqLen } = alignedRun(cache.lengths, pastLength, tokens, this.padsFirstRun)
    const past = this.#session.cacheInPlace
      ? await this.#inPlace(cache, pastLength + seqLen, room)
      : cache.device ?? this.#upload(cache)
    let out
    try {
      out = await this.#session.forward({
        batch: tokens.length,
        inputIds,
        attentionMask,
        positionIds,
        past,
        logitsToKeep,
        prompt,
      })
    } finally {
      // An upload's host tensors are onnxruntime's copy's source only: freed once the run is over.
      if (past !== cache.device) DecoderSession.disposeCache(past)
    }
    const entries = out.newEntries
    if (!entries) throw new Error(`${this.#session.model.onnxPath}: the run returned no cache_delta`)
    // A left-padded row's entries are the last of its run's (alignedRun).
    this.#keep(cache, entries, counts, seqLen, room)
    cache.keys = newKeys(tokens.length)
    // A new present replaces the old; kept in place, it is the past's buffers (counted when made).
    if (cache.device?.tensors !== out.present.tensors) {
      if (cache.device) this.#release(cache.device)
      this.#deviceBytes += kvBytes(out.present)
    }
    cache.device = out.present
    return { logits: out.logits, cache }
  }

  gather (rows: Array<{ cache: RowCache; row: number; length?: number }>, least?: number): DeviceCache {
    const slots = this.#slots.gather(rows.map(r => ({ slots: r.cache as Slots, row: r.row, length: Math.min(r.length ?? Infinity, r.cache.lengths[r.row]) })), least)
    // A row copied whole keeps its key (the same contents); a prefix of one is other contents.
    const keys = rows.map(r => r.length === undefined || r.length >= r.cache.lengths[r.row] ? (r.cache as DeviceCache).keys[r.row] : {})
    return { ...slots, device: null, keys }
  }

  free (rowCache: RowCache): void {
    const cache = rowCache as DeviceCache
    if (cache.device) this.#release(cache.device)
    cache.device = null
    this.#slots.free(cache)
  }

  settle (rowCache: RowCache): RowCache {
    const cache = rowCache as DeviceCache
    if (cache.device) this.#release(cache.device)
    cache.device = null
    return cache
  }

  /** One token a row on the capture step; the host's copy takes their keys and values, as after every run. */
  #capturedRun (captured: CapturedStep, cache: DeviceCache, tokens: number[], room?: CacheRoom): CacheRun {
    const buffers = cache.buffers as Record<string, Float32Array>
    const out = captured.step(cache.lengths.map((length, row) => ({ key: cache.keys[row], length, token: tokens[row], buffers, capacity: cache.capacity, row })))
    this.replayedTokens += tokens.length
    // The rows' entries side by side, [rows, kv heads, 1, head_dim] by name, as a run's cache_delta gives them.
    const each = this.#session.model.numKvHeads * this.#session.model.headDim
    const entries: Record<string, Float32Array> = {}
    for (const name of this.#names) {
      const data = new Float32Array(tokens.length * each)
      out.newEntries.forEach((rowEntries, b) => data.set(rowEntries[name], b * each))
      entries[name] = data
    }
    this.#keep(cache, entries, tokens.map(() => 1), 1, room)
    cache.keys = out.keys
    // The cache's own GPU buffers miss this position now: a run elsewhere makes them again from the host's copy.
    if (cache.device) this.#release(cache.device)
    cache.device = null
    const vocab = this.#session.model.vocabSize
    const logits = new Float32Array(tokens.length * vocab)
    out.logits.forEach((rowLogits, b) => logits.set(rowLogits, b * vocab))
    return { logits, cache }
  }

  /**
   * The host's copy takes a run's entries (`counts[b]` for row b, the last of each row's `seqLen`),
   * grown first, as `room` says (SlotBuffers.grown), when they do not fit.
   */
  #keep (cache: DeviceCache, entries: Record<string, CacheData>, counts: number[], seqLen: number, room?: CacheRoom): void {
    const needed = Math.max(...cache.lengths.map((len, b) => len + counts[b]))
    if (needed > cache.capacity) {
      const grown = this.#slots.grown(cache, needed, room)
      this.#slots.free(cache)
      Object.assign(cache, grown)
    }
    this.#slots.write(cache, name => entries[name], counts, seqLen, counts.map(n => seqLen - n))
  }

  /** The host's copy as a concat graph's past: rows right-aligned to the longest, on the host (onnxruntime uploads it). */
  #upload (cache: DeviceCache): KvCache {
    const heads = this.#session.model.numKvHeads
    const dim = this.#session.model.headDim
    const rows = cache.lengths.length
    const length = Math.max(...cache.lengths)
    const tensors: Record<string, OrtTensor> = {}
    for (const name of this.#names) {
      const from = cache.buffers[name]
      const data: CacheData = this.#session.cacheType === 'float16' ? new Uint16Array(rows * heads * length * dim) : new Float32Array(rows * heads * length * dim)
      cache.lengths.forEach((len, b) => {
        for (let h = 0; h < heads; h++) {
          const start = (b * heads + h) * cache.capacity * dim
          data.set(from.subarray(start, start + len * dim), ((b * heads + h) * length + (length - len)) * dim)
        }
      })
      tensors[name] = new ort.Tensor(this.#session.cacheType, data, [rows, heads, length, dim])
    }
    return { tensors, length }
  }

  /** A one-row cache's host copy as a past of `capacity` positions, its length the row's: views, not copies. */
  #hostView (cache: DeviceCache): KvCache {
    const dims = [1, this.#session.model.numKvHeads, cache.capacity, this.#session.model.headDim]
    const tensors: Record<string, OrtTensor> = {}
    for (const name of this.#names) tensors[name] = new ort.Tensor(this.#session.cacheType, cache.buffers[name], dims)
    return { tensors, length: cache.lengths[0] }
  }

  /**
   * The GPU buffers a run on a cache kept in place writes into, with room for `total` positions:
   * the cache's own when they have it; else made from it (the GPU's copy, or the host's), with
   * twice the old room (64 more positions than the run needs at first) or what `room` says the
   * rows will reach, never past its `most` unless the run needs it, in steps of 64: the host's
   * copy grows alike (SlotBuffers.grown).
   */
  async #inPlace (cache: DeviceCache, total: number, room?: CacheRoom): Promise<KvCache> {
    const held = cache.device ? roomOf(cache.device) : 0
    if (cache.device && held >= total) return cache.device
    // One row's host copy goes up as it is (its slots past its length are zeros, as the padding is);
    // rows of several lengths are right-aligned first (#upload).
    const borrowed = !cache.device && cache.lengths.length === 1
    const source = cache.device ?? (borrowed ? this.#hostView(cache) : this.#upload(cache))
    const least = Math.max(total + ROOM_STEP, room?.least ?? 0)
    const size = Math.max(roomOf(source), Math.ceil(grownRoom(total, held, { most: room?.most ?? Infinity, least }) / ROOM_STEP) * ROOM_STEP)
    const buffers = await this.#session.gpuBuffers()
    const tensors: Record<string, OrtTensor> = {}
    try {
      for (const name of this.#names) tensors[name] = await buffers.padded(source.tensors[name], size)
    } catch (err) {
      DecoderSession.disposeCache({ tensors, length: 0 })
      throw err
    } finally {
      // A borrowed view's data is the host's copy, kept; an upload's is freed.
      if (borrowed) for (const t of Object.values(source.tensors)) t.dispose()
      else if (source !== cache.device) DecoderSession.disposeCache(source)
    }
    if (cache.device) this.#release(cache.device)
    cache.device = { tensors, length: source.length }
    this.#deviceBytes += kvBytes(cache.device)
    return cache.device
  }

  #release (kv: KvCache): void {
    this.#deviceBytes -= kvBytes(kv)
    DecoderSession.disposeCache(kv)
  }
}

/** Positions a cache kept in place grows by at least, and rounds its room to. */
const ROOM_STEP = 64

/** Positions a cache's tensors have room for, [rows, heads, room, dim] (a GPU buffer's or a host view's). */
function roomOf (kv: KvCache): number {
  return Object.values(kv.tensors)[0].dims[2]
}

/** Bytes of a cache's tensors, from their shapes (a GPU buffer's data cannot be read here). */
function kvBytes (kv: KvCache): number {
  let bytes = 0
  for (const t of Object.values(kv.tensors)) bytes += t.dims.reduce((n, d) => n * d, 1) * (t.type === 'float16' ? 2 : 4)
  return bytes
}

/** A new key for each of `rows` rows (DeviceCache.keys). */
function newKeys (rows: number): object[] {
  return Array.from({ length: rows }, () => ({}))
}
