// What the scheduler and the prefix cache see of a key/value cache: rows that
// hold positions, runs that feed them tokens and give logits, and gathers that
// copy rows into new caches. How the cache is kept (kv-cache.ts, and
// device-cache.ts for a cache in GPU memory) is the layout's business alone.

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
