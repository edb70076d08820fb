// The contract between the limiter (policy: which tier, which limits, what a
// request costs) and where the counts live. Two stores implement it with the
// same algorithm: in-process (one server) and Redis (several replicas, one
// count). Every admit is all-or-nothing: a refused request consumes nothing,
// so an account limited to N requests a minute gets exactly N through however
// many replicas its requests are spread over.
//
// The windows are rolling: a request counts for 60 s after it was admitted;
// tokens count for 60 s after their request was admitted, first as the
// reservation and, once the request has ended, as the real count.

export const WINDOW_MS = 60_000

export interface Rules {
  /** null: no such limit. */
  requestsPerMinute: number | null
  tokensPerMinute: number | null
  callsPerMonth: number | null
}

export interface MonthRef {
  /** YYYY-MM: names the month's counter. */
  id: string
  /** When the month ends (Unix ms): Retry-After of an exhausted allowance, and the counter's lifetime. */
  endMs: number
}

/** What an account has used, as the store sees it now. */
export interface Usage {
  /** Requests admitted in the rolling minute. */
  requests: number
  /** Tokens reserved or settled in the rolling minute. */
  tokens: number
  /** Calls this month, whatever the tier; null when the month's counter does not exist yet (no call since the start, or Redis lost it). */
  calls: number | null
  /** Until the oldest counted request leaves the window (the next slot frees); 0 when none is counted. */
  requestsResetMs: number
  /** Until the oldest counted tokens leave the window; 0 when none are counted. */
  tokensResetMs: number
}

export interface AdmitRequest {
  accountId: number
  /** Unique per request: names its window entries so settle() can find them. */
  requestId: string
  /** Tokens to reserve now. */
  tokens: number
  rules: Rules
  month: MonthRef
  /**
   * The month's call count from the usage records, given on the second try
   * after a 'needs-seed' answer: the counter starts from it (after a restart,
   * or a Redis that lost its data), so the allowance survives both.
   */
  monthSeed?: number
}

export type Limit = 'requests' | 'tokens' | 'allowance'

export type AdmitResult =
  | { outcome: 'admitted'; usage: Usage }
  | { outcome: 'refused'; limit: Limit; retryAfterMs: number; usage: Usage }
  | { outcome: 'needs-seed' }

export interface SettleRequest {
  accountId: number
  requestId: string
  /** The real token count; replaces the reservation if it is still in the window. */
  tokens: number
  /** Gives the month's call back (a request that failed without a completion). */
  refundCall: boolean
  month: MonthRef
}

export interface LimitStore {
  readonly kind: 'memory' | 'redis'
  admit (request: AdmitRequest): Promise<AdmitResult>
  settle (request: SettleRequest): Promise<void>
  /** The account's usage without admitting anything. */
  peek (accountId: number, month: MonthRef): Promise<Usage>
  /**
   * Adds `tokens` to an admitted request's reservation, all or nothing: false (nothing added) when
   * the minute's tokens would pass `tokensPerMinute`. A request whose entry has left the window
   * adds nothing and is told whether the tokens fit.
   */
  extend (request: ExtendRequest): Promise<boolean>
  close (): Promise<void>
}

export interface ExtendRequest {
  accountId: number
  requestId: string
  tokens: number
  /** null: no such limit (the tokens are added). */
  tokensPerMinute: number | null
}
