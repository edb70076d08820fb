// Counts the responses of one kind of client (streamed or not) and checks each
// against what chatd promises under load: 200, or a refusal (503
// server_overloaded, 429) that carries Retry-After and the API's error body.
// Anything else is a violation, listed with its first examples.

export interface Percentiles {
  p50: number | null
  p95: number | null
  p99: number | null
}

export function percentiles (values: number[]): Percentiles {
  const sorted = [...values].sort((a, b) => a - b)
  const at = (p: number): number | null => sorted.length === 0 ? null : Math.round(sorted[Math.min(sorted.length - 1, Math.floor(p * sorted.length))])
  return { p50: at(0.5), p95: at(0.95), p99: at(0.99) }
}

/** The statuses a client may see under load. */
export const REFUSAL_STATUSES = [429, 503]

export interface ResponseSeen {
  /** null: no response at all (socket error). */
  status: number | null
  retryAfter?: string | null
  errorBody?: unknown
  /** For a 200: what went wrong with its body (a malformed stream), if anything. */
  problem?: string
  completionTokens?: number
}

export interface TallySummary {
  responses: number
  byStatus: Record<string, number>
  refusals: number
  refusalsWithRetryAfter: number
  completionTokens: number
  latencyMs: Percentiles
  ttftMs?: Percentiles
  /** Responses that break the promise, counted; `examples` shows the first few. */
  violations: number
  examples: string[]
}

export class Tally {
  readonly #byStatus = new Map<string, number>()
  readonly #latencies: number[] = []
  readonly #ttfts: number[] = []
  #responses = 0
  #refusals = 0
  #withRetryAfter = 0
  #completionTokens = 0
  #violations = 0
  readonly #examples: string[] = []

  response (seen: ResponseSeen): void {
    this.#responses++
    const key = seen.status === null ? 'no response' : String(seen.status)
    this.#byStatus.set(key, (this.#byStatus.get(key) ?? 0) + 1)
    this.#completionTokens += seen.completionTokens ?? 0
    if (seen.status === 200) {
      if (seen.problem) this.violation(`200 with a bad body: ${seen.problem}`)
      return
    }
    if (seen.status !== null && REFUSAL_STATUSES.includes(seen.status)) {
      this.#refusals++
      if (seen.retryAfter) this.#withRetryAfter++
      else this.violation(`${seen.status} without Retry-After`)
      if (!isErrorBody(seen.errorBody)) this.violation(`${seen.status} without the error body: ${JSON.stringify(seen.errorBody)?.slice(0, 200)}`)
      return
    }
    this.violation(seen.status === null ? `no response: ${seen.problem ?? 'socket error'}` : `status ${seen.status}: ${JSON.stringify(seen.errorBody)?.slice(0, 200)}`)
  }

  /** Latency of a 200 (refusals are immediate and would hide the served requests' latency). */
  latency (ms: number): void {
    this.#latencies.push(ms)
  }

  ttft (ms: number): void {
    this.#ttfts.push(ms)
  }

  /** A failure outside any response (a connection error, a timeout). */
  violation (what: string): void {
    this.#violations++
    if (this.#examples.length < 10) this.#examples.push(what)
  }

  summary (): TallySummary {
    return {
      responses: this.#responses,
      byStatus: Object.fromEntries(this.#byStatus),
      refusals: this.#refusals,
      refusalsWithRetryAfter: this.#withRetryAfter,
      completionTokens: this.#completionTokens,
      latencyMs: percentiles(this.#latencies),
      ...(this.#ttfts.length > 0 ? { ttftMs: percentiles(this.#ttfts) } : {}),
      violations: this.#violations,
      examples: [...this.#examples],
    }
  }
}

/** The API's error body: {"error":{"message","type","param","code"}}. */
export function isErrorBody (body: unknown): boolean {
  const error = (body as { error?: Record<string, unknown> } | null)?.error
  return typeof error === 'object' && error !== null &&
    typeof error.message === 'string' && typeof error.type === 'string' && typeof error.code === 'string' &&
    'param' in error && (error.param === null || typeof error.param === 'string')
}
