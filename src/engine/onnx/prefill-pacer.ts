// How many prompt tokens to feed per run while other sequences decode.
//
// A prompt chunk delays every decoding stream by its whole run, and a smaller
// chunk delays them less but makes the new request's first token later. The
// pacer keeps a chunk's expected run within STALL_FACTOR decode steps. It
// learns from the engine's own timings: a run costs about one decode step (one
// pass over the weights) plus a cost per prompt token, both tracked as moving
// averages, so the size fits the machine (measured on a 2-core CPU with the
// 1.5B int4 model: ~90 ms per 4-row step and ~10 ms per prompt token give
// chunks of about 6; a GPU's per-token cost is tiny and its chunks grow to the
// cap). A decoding stream's longest gaps are one step plus one chunk, about
// (1 + STALL_FACTOR) steps: 1.75 keeps them within 3x a lone stream's
// inter-token p95 at 4 streams (2.5 gave 3.7x: `npm run bench`, block 64,
// ITL p95 58 ms alone, 212 ms at 4 streams; chunks of 6: 2.8x).
const STALL_FACTOR = 1.75
const SMOOTHING = 0.2
const MIN_CHUNK = 4
const MAX_CHUNK = 512

export class PrefillPacer {
  /** Chunk size before there are timings to go by. */
  readonly initial: number
  #decodeMs: number | null = null
  #perTokenMs: number | null = null

  constructor (initial: number) {
    this.initial = initial
  }

  recordDecode (ms: number): void {
    this.#decodeMs = average(this.#decodeMs, ms)
  }

  recordPrefill (tokens: number, ms: number): void {
    if (this.#decodeMs === null || tokens < 2) return
    // What the chunk cost beyond the weight pass a decode step pays too.
    const perToken = Math.max(0, ms - this.#decodeMs) / tokens
    this.#perTokenMs = average(this.#perTokenMs, perToken)
  }

  chunkSize (): number {
    if (this.#decodeMs === null || this.#perTokenMs === null) return this.initial
    if (this.#perTokenMs === 0) return MAX_CHUNK
    const size = Math.floor(((STALL_FACTOR - 1) * this.#decodeMs) / this.#perTokenMs)
    return Math.max(MIN_CHUNK, Math.min(MAX_CHUNK, size))
  }
}

function average (current: number | null, sample: number): number {
  return current === null ? sample : current + SMOOTHING * (sample - current)
}
