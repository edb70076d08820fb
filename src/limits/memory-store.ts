// The in-process limit store: right for one chatd process (the default).
// Every operation is synchronous inside, so concurrent requests of one process
// cannot interleave within an admit. The algorithm is the Redis store's, kept
// in the same order so both answer alike (test/limits runs one suite on both).

import { WINDOW_MS, type AdmitRequest, type AdmitResult, type ExtendRequest, type Limit, type LimitStore, type MonthRef, type SettleRequest, type Usage } from './store.ts'

interface Entry {
  id: string
  at: number
  tokens: number
}

interface AccountState {
  /** Admitted requests of the rolling minute, oldest first; each carries its tokens. */
  entries: Entry[]
  /** This month's call counter; absent until seeded. */
  month?: { id: string; calls: number }
}

export class MemoryLimitStore implements LimitStore {
  readonly kind = 'memory'
  readonly #accounts = new Map<number, AccountState>()
  readonly #now: () => number
  readonly #windowMs: number

  /** `windowMs` is 60 s; tests shorten it to watch entries leave. */
  constructor (opts: { now?: () => number; windowMs?: number } = {}) {
    this.#now = opts.now ?? Date.now
    this.#windowMs = opts.windowMs ?? WINDOW_MS
  }

  #state (accountId: number, now: number): AccountState {
    let state = this.#accounts.get(accountId)
    if (!state) {
      state = { entries: [] }
      this.#accounts.set(accountId, state)
    }
    // An entry at exactly now - 60 s has left the window (the Redis store trims the same way).
    state.entries = state.entries.filter(e => e.at > now - this.#windowMs)
    return state
  }

  #usage (state: AccountState, month: MonthRef, now: number): Usage {
    const oldest = state.entries[0]
    const reset = oldest ? oldest.at + this.#windowMs - now : 0
    return {
      requests: state.entries.length,
      tokens: state.entries.reduce((n, e) => n + e.tokens, 0),
      calls: state.month?.id === month.id ? state.month.calls : null,
      requestsResetMs: reset,
      tokensResetMs: reset,
    }
  }

  async admit (r: AdmitRequest): Promise<AdmitResult> {
    const now = this.#now()
    const state = this.#state(r.accountId, now)
    const { requestsPerMinute: rpm, tokensPerMinute: tpm, callsPerMonth } = r.rules

    // The month's calls are counted whatever the tier, so a tier change (to one without an
    // allowance and back) cannot reset them; only a tier with an allowance refuses on them.
    if (state.month?.id !== r.month.id) {
      if (r.monthSeed === undefined) return { outcome: 'needs-seed' }
      state.month = { id: r.month.id, calls: r.monthSeed }
    }
    const usage = this.#usage(state, r.month, now)

    if (callsPerMonth !== null && usage.calls! >= callsPerMonth) {
      return { outcome: 'refused', limit: 'allowance', retryAfterMs: r.month.endMs - now, usage }
    }
    let limit: Limit | undefined
    let retryAfterMs = 0
    if (rpm !== null && usage.requests >= rpm) {
      // The request that must leave the window before one more fits.
      const freeing = state.entries[usage.requests - rpm]
      limit = 'requests'
      retryAfterMs = rpm === 0 ? this.#windowMs : freeing.at + this.#windowMs - now
    }
    if (tpm !== null && usage.tokens + r.tokens > tpm) {
      let wait = this.#windowMs
      let freed = 0
      for (const e of state.entries) {
        freed += e.tokens
        if (usage.tokens - freed + r.tokens <= tpm) {
          wait = e.at + this.#windowMs - now
          break
        }
      }
      if (limit === undefined || wait > retryAfterMs) {
        limit = 'tokens'
        retryAfterMs = wait
      }
    }
    if (limit !== undefined) return { outcome: 'refused', limit, retryAfterMs, usage }

    state.entries.push({ id: r.requestId, at: now, tokens: r.tokens })
    state.month!.calls++
    return { outcome: 'admitted', usage: this.#usage(state, r.month, now) }
  }

  async settle (r: SettleRequest): Promise<void> {
    const state = this.#accounts.get(r.accountId)
    if (!state) return
    const entry = state.entries.find(e => e.id === r.requestId)
    if (entry) entry.tokens = r.tokens
    if (r.refundCall && state.month?.id === r.month.id && state.month.calls > 0) state.month.calls--
  }

  async extend (r: ExtendRequest): Promise<boolean> {
    const now = this.#now()
    const state = this.#state(r.accountId, now)
    const tokens = state.entries.reduce((n, e) => n + e.tokens, 0)
    if (r.tokensPerMinute !== null && tokens + r.tokens > r.tokensPerMinute) return false
    const entry = state.entries.find(e => e.id === r.requestId)
    if (entry) entry.tokens += r.tokens
    return true
  }

  async peek (accountId: number, month: MonthRef): Promise<Usage> {
    const now = this.#now()
    const state = this.#state(accountId, now)
    const usage = this.#usage(state, month, now)
    // Forget idle accounts so the map holds only the ones with something to count.
    if (state.entries.length === 0 && state.month === undefined) this.#accounts.delete(accountId)
    return usage
  }

  async close (): Promise<void> {
    this.#accounts.clear()
  }
}
