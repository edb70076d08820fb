// What the scheduler and the prefix cache see of a key/value cache: rows that
// hold positions, runs that feed them tokens and give logits, and gathers that
// copy rows into new caches. How the cache is kept (kv-cache.ts, and
// device-cache.ts for a cache in GPU memory) is the layout's business alone.
import { maskRow } from '../device/decoder-session.ts'

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

/**
 * How far a cache may grow when a run does not fit it. `most`: the positions a row may come to hold
 * (its reservation); a growth goes no further unless the run needs it. `least`: positions the rows
 * will reach for certain (a prompt fed in chunks: its end and the first generated token), which a
 * growth makes room for at once instead of growing again at the next chunk: each growth allocates
 * the whole cache anew and copies it.
 */
export interface CacheRoom { most: number; least?: number }

/** Positions a cache that must hold `needed` grows to from `held`: twice as many, or what `room` says will be reached, within its `most`. */
export function grownRoom (needed: number, held: number, room?: CacheRoom): number {
  return Math.max(needed, Math.min(room?.most ?? needed, Math.max(2 * held, room?.least ?? 0)))
}

export interface CacheLayout {
  /** `rows` rows (default one) holding nothing. */
  empty (rows?: number): RowCache
  /**
   * Feeds `tokens[b]` to row b and returns the logits of the last `logitsToKeep` positions. Rows
   * take the same count of tokens unless `packsRows`, or `padsFirstRun` and the cache is empty;
   * then they may differ, and the logits are each row's last token's (`logitsToKeep` 1). When it
   * throws, the cache passed in is unchanged and still the caller's. `prompt`: every token is a
   * prompt token (DecoderSession's prompt graph). `room`: how far a cache that must grow grows
   * ahead (CacheRoom, SlotBuffers.grown).
   */
  run (cache: RowCache, tokens: number[][], logitsToKeep: number, prompt?: boolean, room?: CacheRoom): Promise<CacheRun>
  /** Whether rows of one run may take different numbers of tokens (graphs with tokens_per_row). */
  readonly packsRows: boolean
  /** Whether rows of a run on an empty cache may take different numbers of tokens (left-padded). */
  readonly padsFirstRun: boolean
  /**
   * A new cache holding the given rows, in order; the sources are left as they were. With
   * `length`, a row keeps only its first `length` positions (a cached prefix). `least`: positions
   * the rows will reach for certain, which a layout that grows ahead (CacheRoom's `least`) makes
   * room for at once.
   */
  gather (rows: Array<{ cache: RowCache; row: number; length?: number }>, least?: number): RowCache
  /** Frees a cache's memory now. */
  free (cache: RowCache): void
  /**
   * The cache, taken over, as the prefix cache keeps it: what only runs use (a cache's GPU
   * buffers) let go, the host's copy kept, so the prefix cache holds no GPU memory.
   */
  settle (cache: RowCache): RowCache
  /** Bytes of the caches this layout has handed out and not yet freed. */
  readonly bytesHeld: number
  /** Tokens decoded on a capture step (a device layout with ONNX_WEBGPU_CAPTURE); absent elsewhere. */
  readonly replayedTokens?: number
}

/** A concat graph's inputs for one run over rows right-aligned to the longest (concat caches). */
export interface AlignedRun {
  inputIds: number[][]
  attentionMask: BigInt64Array[]
  positionIds: number[][]
  /** Tokens each row takes in the run, the padding left out. */
  counts: number[]
  /** Positions in the run: the most tokens a row takes. */
  seqLen: number
}

/**
 * Rows hold their positions right-aligned to the longest (left padding, masked out). Rows of one run
 * take the same count of tokens, except on an empty cache (a prompt group's first run): there the
 * shorter prompts go in left-padded too, so each row's positions stay one block at the right end.
 * Left padding has position 0 and is masked out, so a row computes what it computes alone.
 */
export function alignedRun (lengths: readonly number[], total: number, tokens: number[][], padsRows: boolean): AlignedRun {
  const counts = tokens.map(t => t.length)
  const seqLen = Math.max(...counts)
  if (counts.some(n => n !== seqLen) && (total > 0 || !padsRows)) {
    throw new Error(`rows of one run take the same number of tokens here (got ${counts.join(', ')}): only a first run of a graph that takes padded rows pads them`)
  }
  return {
    inputIds: tokens.map(t => t.length === seqLen ? t : [...new Array<number>(seqLen - t.length).fill(0), ...t]),
    attentionMask: lengths.map((len, b) => maskRow(total + seqLen, 0, total + seqLen - len - counts[b])),
    positionIds: lengths.map((len, b) => Array.from({ length: seqLen }, (_, k) => Math.max(0, len + k - (seqLen - counts[b])))),
    counts,
    seqLen,
  }
}
