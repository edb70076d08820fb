// What the engine counts of itself for the server's metrics: runs of the
// model by kind and the tokens they fed, prefix cache look-ups and hits (in
// tokens, as vLLM counts them), and, at each report, how many sequences run
// and wait and how full the KV cache budget is. Reports cross to the main
// thread as messages, so they are throttled: at most one per REPORT_EVERY_MS
// while the engine is busy, and one whenever a request finishes (sent before
// its finish, so a client that reads /metrics after its reply sees its steps),
// or the engine goes idle.
import { wallClock, type EngineStats, type StepKind } from '../../backend.ts'

const REPORT_EVERY_MS = 250
/** Step sizes kept between reports; a report goes out early rather than keep more. */
const MAX_PENDING_STEPS = 4096

/** A report: the counts so far, with the tokens of each step since the last report. */
export interface StatsReport {
  stats: EngineStats
  steps: number[]
}

/** The engine's state at report time. */
export interface EngineLoad {
  running: number
  waiting: number
  kvUsage: number
  prefixCacheUsage: number
  /** Tokens decoded on the capture step since start (the cache layout counts them). */
  replayedTokens: number
}

export class EngineCounters {
  readonly #send: (report: StatsReport) => void
  readonly #steps: Record<StepKind, number> = { prefill: 0, decode: 0, mixed: 0 }
  readonly #stepTokens: Record<StepKind, number> = { prefill: 0, decode: 0, mixed: 0 }
  #pending: number[] = []
  #prefixQueries = 0
  #prefixHits = 0
  #lastReport = 0

  constructor (send: (report: StatsReport) => void) {
    this.#send = send
  }

  /** One run of the model that fed `tokens` tokens. */
  step (kind: StepKind, tokens: number): void {
    this.#steps[kind]++
    this.#stepTokens[kind] += tokens
    this.#pending.push(tokens)
  }

  /** A prompt of `queried` tokens looked up in the prefix cache, `hit` of them found and taken. */
  lookup (queried: number, hit: number): void {
    this.#prefixQueries += queried
    this.#prefixHits += hit
  }

  /** Reports now when `force`, or when the last report is old enough (or too many steps wait). */
  report (load: () => EngineLoad, force = false): void {
    const now = wallClock()
    if (!force && now - this.#lastReport < REPORT_EVERY_MS && this.#pending.length < MAX_PENDING_STEPS) return
    this.#lastReport = now
    const steps = this.#pending
    this.#pending = []
    this.#send({
      stats: {
        ...load(),
        prefixQueries: this.#prefixQueries,
        prefixHits: this.#prefixHits,
        steps: { ...this.#steps },
        stepTokens: { ...this.#stepTokens },
      },
      steps,
    })
  }
}
