// Host buffers for a batch's cache with room to spare: one per
// past_key_values.N.* name, [rows, kv heads, capacity, head_dim]. Row b's
// positions fill slots 0..len-1 (right padding); a run's new entries are
// written into the next free slots. Capacity grows in steps of CAPACITY_STEP
// slots, so a decode step almost never reallocates; where the caller says how
// many positions the rows may come to hold (`room`: their reservation), it
// doubles instead, up to that, so a long prompt fed in chunks and a long reply
// copy the cache a few times rather than once a chunk or every CAPACITY_STEP
// steps (each copy is the whole cache: 450 MB at 8k positions of a 1.5B model).
// The append layout feeds these buffers to the graph as they are; the device
// layout keeps them as the host's copy of a cache that lives in GPU memory.
//
// Freed buffers are kept for reuse, up to `spare.most` bytes (one context window's
// cache, set by the engine) and while they and the buffers in use fit `spare.total`
// (the KV budget's bytes): memory the process has never written costs a page fault per
// 4 KiB on first touch, and glibc maps buffers of 32 MiB and more afresh every time. A
// copy of an 8k-token cache of the 1.5B (450 MB) took 1.0-1.3 s into new buffers and
// 50-70 ms into written ones (docs/performance.md). A reused buffer is zeroed first: a
// cache's unused slots are zeros.

import { type CacheRoom, grownRoom } from './cache-layout.ts'

export type CacheData = Float32Array | Uint16Array

/** Slots added at a time when a cache grows. */
export const CAPACITY_STEP = 64

/** Buffers smaller than this are not kept for reuse: their first touch costs little. */
export const SPARE_MIN_BYTES = 256 * 2 ** 10

/** Freed memory kept for reuse: at most `most` bytes, and only while it and the buffers in use come to `total` at most. */
export interface SpareLimits { most: number; total: number }

export interface Slots {
  lengths: number[]
  capacity: number
  /** One buffer per past_key_values.N.* input, [rows, kv heads, capacity, head_dim]. */
  buffers: Record<string, CacheData>
}

/** A row's first `length` positions, for copying. */
export interface SlotRow { slots: Slots; row: number; length: number }

export class SlotBuffers {
  readonly #names: string[]
  readonly #heads: number
  readonly #dim: number
  readonly #half: boolean
  /** Bytes of the buffers allocated and not yet freed (whole buffers: a reused one may be larger than its view). */
  bytesHeld = 0
  /** Freed buffers kept for reuse, oldest first. */
  readonly #spares: ArrayBuffer[] = []
  readonly #spare: SpareLimits
  /** Bytes of the spares. */
  spareBytes = 0

  constructor (names: string[], shape: { heads: number; dim: number; type: 'float32' | 'float16' }, spare: SpareLimits = { most: 0, total: 0 }) {
    this.#names = names
    this.#heads = shape.heads
    this.#dim = shape.dim
    this.#half = shape.type === 'float16'
    this.#spare = spare
  }

  allocate (lengths: number[], capacity: number): Slots {
    const buffers: Record<string, CacheData> = {}
    for (const name of this.#names) {
      buffers[name] = this.#buffer(lengths.length * this.#heads * capacity * this.#dim)
      this.bytesHeld += buffers[name].buffer.byteLength
    }
    return { lengths: [...lengths], capacity, buffers }
  }

  /** A zeroed buffer of `size` elements: the smallest spare that holds it (at most twice its size), else a new one. */
  #buffer (size: number): CacheData {
    const bytes = size * (this.#half ? 2 : 4)
    let best = -1
    this.#spares.forEach((spare, i) => {
      if (spare.byteLength >= bytes && spare.byteLength <= 2 * bytes && (best < 0 || spare.byteLength < this.#spares[best].byteLength)) best = i
    })
    if (best < 0) {
      // Spares give way before new memory takes the buffers in use and the spares past the total.
      while (this.#spares.length > 0 && this.bytesHeld + this.spareBytes + bytes > this.#spare.total) this.#dropOldest()
      return this.#half ? new Uint16Array(size) : new Float32Array(size)
    }
    const [spare] = this.#spares.splice(best, 1)
    this.spareBytes -= spare.byteLength
    const data = this.#half ? new Uint16Array(spare, 0, size) : new Float32Array(spare, 0, size)
    return data.fill(0)
  }

  /** New slots holding the given rows, with room for `least` positions where that is more (one free slot at least: the next decode step fits without growing). */
  gather (rows: SlotRow[], least = 0): Slots {
    const out = this.allocate(rows.map(r => r.length), roundUp(Math.max(least, Math.max(...rows.map(r => r.length)) + 1), CAPACITY_STEP))
    this.copyRows(rows, out)
    return out
  }

  /**
   * The same rows in larger buffers with room for `needed` positions; with `room`, twice the old
   * capacity or the positions the rows will reach where that is more, never past its `most`.
   */
  grown (slots: Slots, needed: number, room?: CacheRoom): Slots {
    const out = this.allocate(slots.lengths, roundUp(grownRoom(needed, slots.capacity, room), CAPACITY_STEP))
    this.copyRows(slots.lengths.map((length, row) => ({ slots, row, length })), out)
    return out
  }

  /** Copies each source row's first `length` positions into row b of `into`. */
  copyRows (sources: SlotRow[], into: Slots): void {
    const heads = this.#heads
    const dim = this.#dim
    for (const name of this.#names) {
      const to = into.buffers[name]
      sources.forEach((src, b) => {
        const from = src.slots.buffers[name]
        for (let h = 0; h < heads; h++) {
          const start = (src.row * heads + h) * src.slots.capacity * dim
          to.set(from.subarray(start, start + src.length * dim), (b * heads + h) * into.capacity * dim)
        }
      })
    }
  }

  /**
   * Writes a run's entries ([rows, kv heads, seqLen, head_dim] per name) into the next free slots:
   * row b's counts[b] from position skip[b] (0: padding after the tokens; seqLen - counts[b]: left
   * padding) only, so padding's keys and values are never kept. The slots must have room; their
   * lengths grow by the counts.
   */
  write (slots: Slots, entries: (name: string) => CacheData, counts: number[], seqLen: number, skip: number[] = counts.map(() => 0)): void {
    const heads = this.#heads
    const dim = this.#dim
    for (const name of this.#names) {
      const data = entries(name)
      const buffer = slots.buffers[name]
      counts.forEach((count, b) => {
        for (let h = 0; h < heads; h++) {
          const from = ((b * heads + h) * seqLen + skip[b]) * dim
          buffer.set(data.subarray(from, from + count * dim), ((b * heads + h) * slots.capacity + slots.lengths[b]) * dim)
        }
      })
    }
    slots.lengths = slots.lengths.map((len, b) => len + counts[b])
  }

  /**
   * Frees the slots' buffers (kept for reuse while the spares have room). The slots lose them,
   * and so does any copy of the slots that shares their `buffers`: freeing twice frees once.
   */
  free (slots: Slots): void {
    for (const name of this.#names) {
      // The buffers are this module's own, never shared with a tensor that outlives a run.
      const buffer = slots.buffers[name]?.buffer
      delete slots.buffers[name]
      if (!(buffer instanceof ArrayBuffer) || buffer.detached || this.#spares.includes(buffer)) continue
      this.bytesHeld -= buffer.byteLength
      if (buffer.byteLength < SPARE_MIN_BYTES || buffer.byteLength > this.#spare.most || this.bytesHeld + buffer.byteLength > this.#spare.total) {
        buffer.transfer(0)
        continue
      }
      this.#spares.push(buffer)
      this.spareBytes += buffer.byteLength
      while (this.spareBytes > this.#spare.most || this.bytesHeld + this.spareBytes > this.#spare.total) this.#dropOldest()
    }
  }

  #dropOldest (): void {
    const oldest = this.#spares.shift() as ArrayBuffer
    this.spareBytes -= oldest.byteLength
    oldest.transfer(0)
  }
}

export function roundUp (n: number, step: number): number {
  return Math.ceil(n / step) * step
}
