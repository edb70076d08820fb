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
//
// With mixed batches the chunk rides in a decode step of its batch, so that
// one run is the streams' whole gap: it is given the same (1 + STALL_FACTOR)
// steps, and the pass over the weights a run of its own would have paid goes
// to the prompt. Such a run is compared with a plain step of as many decoding
// rows (a step's cost grows with its rows; the last step, of another size,
// would misjudge the prompt's share).
const STALL_FACTOR = 1.75
const SMOOTHING = 0.2
const MIN_CHUNK = 4
const MAX_CHUNK = 512

export class PrefillPacer {
  /** Chunk size before there are timings to go by. */
  readonly initial: number
  #decodeMs: number | null = null
  /** Decode steps' time by their number of rows. */
  readonly #decodeMsByRows = new Map<number, number>()
  #perTokenMs: number | null = null

  constructor (initial: number) {
    this.initial = initial
  }

  /** A decode step of `rows` rows took `ms`. */
  recordDecode (ms: number, rows = 1): void {
    this.#decodeMs = average(this.#decodeMs, ms)
    this.#decodeMsByRows.set(rows, average(this.#decodeMsByRows.get(rows) ?? null, ms))
  }

  /**
   * A run fed `tokens` prompt tokens in `ms`: in a run of their own (`decodeRows` 0), or beside
   * `decodeRows` decoding rows' tokens (mixed batches).
   */
  recordPrefill (tokens: number, ms: number, decodeRows = 0): void {
    const base = this.#stepMs(decodeRows)
    if (base === null || tokens < 2) return
    // What the chunk cost beyond the weight pass a decode step pays too.
    const perToken = Math.max(0, ms - base) / tokens
    this.#perTokenMs = average(this.#perTokenMs, perToken)
  }

  /**
   * Prompt tokens for the next run: a run of its own between decode steps, or (`decodeRows` > 0,
   * mixed batches) riding in a step of that many decoding rows.
   */
  chunkSize (decodeRows = 0): number {
    const step = this.#stepMs(decodeRows)
    if (step === null || this.#perTokenMs === null) return this.initial
    if (this.#perTokenMs === 0) return MAX_CHUNK
    const stepsForPrompt = decodeRows > 0 ? STALL_FACTOR : STALL_FACTOR - 1
    const size = Math.floor((stepsForPrompt * step) / this.#perTokenMs)
    return Math.max(MIN_CHUNK, Math.min(MAX_CHUNK, size))
  }

  /** A decode step's time: of `rows` rows where measured, else of the latest steps. */
  #stepMs (rows: number): number | null {
    return (rows > 0 ? this.#decodeMsByRows.get(rows) : undefined) ?? this.#decodeMs
  }
}

function average (current: number | null, sample: number): number {
  return current === null ? sample : current + SMOOTHING * (sample - current)
}
