// How a local engine schedules its sequences, and the defaults: one place that
// both the engine and the settings (config.ts, MAX_BATCH and PREFILL_CHUNK)
// read, without config.ts loading the engine.

export interface SchedulerSettings {
  /** Sequences decoding at once; more wait for a free row. */
  maxBatch: number
  /** Prompt tokens fed per run while other sequences are decoding; 0 picks by device. */
  prefillChunk: number
}

export const DEFAULT_SCHEDULER: SchedulerSettings = { maxBatch: 8, prefillChunk: 0 }
