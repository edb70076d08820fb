// The limits policy for one chat completion, checked before any generation:
// model access (403), the per-request token cap (400), then requests and
// tokens per minute and the monthly allowance (429), all in one atomic step
// of the store. An admitted request gets a Permit; when the request ends the
// Permit settles the real token count and, for a request that failed without
// a completion, gives its call of the allowance back.

import { randomUUID } from 'node:crypto'
import type { Account } from '../accounts/accounts.ts'
import type { Tier, Tiers } from '../accounts/tiers.ts'
import type { UsageRecords } from '../accounts/usage-records.ts'
import { ApiError } from '../errors.ts'
import { monthOf, type Month } from './calendar.ts'
import { rateLimitHeaders, retryAfterHeaders } from './headers.ts'
import type { AdmitRequest, AdmitResult, LimitStore, Rules, Usage } from './store.ts'
import { limitsUnavailableError } from './unavailable.ts'

export interface CompletionAsk {
  model: string
  /** The reply's token cap as sent; undefined when absent. */
  maxTokens?: number
  /**
   * What the client's door calls that cap (max_tokens, max_completion_tokens, max_output_tokens),
   * for the messages; the errors' `param` is the neutral `max_tokens` (or `messages` for the prompt),
   * which the door renames.
   */
  maxTokensName?: string
  /** The prompt's estimated tokens (request-cost.ts). */
  promptTokens: number
  /** The model's context window, when known. */
  contextLength?: number
}

export interface AccountLimits {
  tier: Tier
  usage: Usage
  month: Month
  /** Calls left this month; null when the tier has no allowance. */
  callsRemaining: number | null
  headers: Record<string, string>
}

/**
 * A store that cannot answer (Redis down or slow) refuses the request with
 * 503 rather than letting it through uncounted: limits that hold only while
 * Redis is up would not be limits.
 */
async function fromStore<T> (work: Promise<T>): Promise<T> {
  try {
    return await work
  } catch (err) {
    throw limitsUnavailableError(err)
  }
}

/** How long after a failure of the store headersFor() leaves it alone. */
const STORE_DOWN_SKIP_MS = 1000

const rulesOf = (tier: Tier): Rules => ({
  requestsPerMinute: tier.requestsPerMinute,
  tokensPerMinute: tier.tokensPerMinute,
  callsPerMonth: tier.callsPerMonth,
})

/**
 * What a request reserves for its reply, and the max_tokens the backend gets.
 * With max_tokens, that. Without, the reply may run until the tightest of: the
 * tier's max_tokens_per_request, what tokens_per_minute leaves after the
 * prompt (a reply may never take more than the minute's budget), and the room
 * the model's context leaves after the prompt. The backend is told the bound
 * only when it is tighter than the context, where the model stops by itself.
 */
export function replyBounds (ask: CompletionAsk, cap: number | null, tpm: number | null): { maxTokens: number | undefined; reply: number } {
  if (ask.maxTokens !== undefined) return { maxTokens: ask.maxTokens, reply: ask.maxTokens }
  const budget = tpm === null ? null : tpm - ask.promptTokens
  const bounds = [cap, budget].filter((n): n is number => n !== null)
  const bound = bounds.length > 0 ? Math.min(...bounds) : undefined
  const maxTokens = bound !== undefined && (ask.contextLength === undefined || bound < ask.contextLength) ? bound : undefined
  const room = ask.contextLength === undefined ? undefined : Math.max(0, ask.contextLength - ask.promptTokens)
  const reply = Math.min(bound ?? Infinity, room ?? Infinity)
  return { maxTokens, reply: Number.isFinite(reply) ? reply : 0 }
}

export class Permit {
  /** x-ratelimit-* as of this request's admission. */
  readonly headers: Record<string, string>
  /** The max_tokens the backend gets: the request's, or, when it sent none, the bound replyBounds() found where it is tighter than the context. */
  readonly maxTokens: number | undefined
  /** The most the reply may use, as reserved: max_tokens, or the bound replyBounds() found; null when nothing bounds it. */
  readonly replyLimit: number | null
  /** The most prompt and reply may use together: the tier's tokens per minute; null without one. */
  readonly totalLimit: number | null
  readonly #settle: (tokens: number | null, refundCall: boolean) => Promise<void>
  readonly #extend: (tokens: number) => Promise<boolean>
  #settled = false

  constructor (opts: { headers: Record<string, string>; maxTokens: number | undefined; replyLimit: number | null; totalLimit?: number | null },
    settle: (tokens: number | null, refundCall: boolean) => Promise<void>, extend: (tokens: number) => Promise<boolean> = async () => true) {
    this.headers = opts.headers
    this.maxTokens = opts.maxTokens
    this.replyLimit = opts.replyLimit
    this.totalLimit = opts.totalLimit ?? null
    this.#settle = settle
    this.#extend = extend
  }

  /**
   * Reserves `tokens` more for this request (a later round of one reply, which sends its
   * conversation again): false, reserving nothing, when they do not fit the minute's tokens.
   */
  async extend (tokens: number): Promise<boolean> {
    if (this.#settled) return false
    return this.#extend(tokens)
  }

  /**
   * Called once when the request ends. `tokens` is the real prompt +
   * completion count, or null when it is unknown (the reservation stands).
   * `failed`: no completion came of it, so the month's call is given back.
   */
  async settle (tokens: number | null, failed: boolean): Promise<void> {
    if (this.#settled) return
    this.#settled = true
    await this.#settle(tokens, failed)
  }
}

export class Limiter {
  readonly tiers: Tiers
  readonly store: LimitStore
  readonly #usage: UsageRecords
  readonly #now: () => number
  /** Until when headersFor() does not ask the store, which has just failed. */
  #storeDownUntil = 0

  constructor (opts: { tiers: Tiers; store: LimitStore; usage: UsageRecords; now?: () => number }) {
    this.tiers = opts.tiers
    this.store = opts.store
    this.#usage = opts.usage
    this.#now = opts.now ?? Date.now
  }

  tierOf (account: Account): Tier {
    return this.tiers.resolve(account.tier)
  }

  /** Checks every limit for one chat completion; throws the refusal as an ApiError with its headers. */
  async admit (account: Account, ask: CompletionAsk): Promise<Permit> {
    const tier = this.tierOf(account)
    if (!this.tiers.allowsModel(tier, ask.model)) {
      throw new ApiError('model_not_allowed', `The ${tier.name} tier may not use the model '${ask.model}'.`, { param: 'model' })
    }
    const cap = tier.maxTokensPerRequest
    const param = 'max_tokens'
    const name = ask.maxTokensName ?? param
    if (ask.maxTokens !== undefined && cap !== null && ask.maxTokens > cap) {
      throw new ApiError('invalid_parameter', `${name} is ${ask.maxTokens}; the ${tier.name} tier allows at most ${cap} tokens per request.`, { param })
    }
    const tpm = tier.tokensPerMinute
    if (tpm !== null && ask.maxTokens !== undefined && ask.promptTokens + ask.maxTokens > tpm) {
      throw new ApiError('invalid_parameter',
        `This request reserves ${ask.promptTokens + ask.maxTokens} tokens (about ${ask.promptTokens} of prompt plus ${ask.maxTokens} of ${name}), more than the ${tier.name} tier's ${tpm} tokens per minute; lower ${name} or shorten the prompt.`,
        { param: ask.promptTokens < tpm ? param : 'messages' })
    }
    if (tpm !== null && ask.maxTokens === undefined && ask.promptTokens >= tpm) {
      throw new ApiError('invalid_parameter',
        `The prompt alone (about ${ask.promptTokens} tokens) leaves no room for a reply within the ${tier.name} tier's ${tpm} tokens per minute; shorten the prompt.`,
        { param: 'messages' })
    }
    const { maxTokens, reply } = replyBounds(ask, cap, tpm)
    const reserve = ask.promptTokens + reply

    const month = monthOf(this.#now())
    const requestId = randomUUID()
    const result = await this.#admitInStore({ accountId: account.id, requestId, tokens: reserve, rules: rulesOf(tier), month })

    const headers = rateLimitHeaders(tier, result.usage)
    if (result.outcome === 'refused') {
      const refusalHeaders = { ...headers, ...retryAfterHeaders(result.retryAfterMs) }
      if (result.limit === 'allowance') {
        throw new ApiError('allowance_exhausted',
          `This account has used its ${tier.callsPerMonth} calls for this month (${tier.name} tier); the allowance renews on ${new Date(month.endMs).toISOString().slice(0, 10)} (UTC).`,
          { headers: refusalHeaders })
      }
      const what = result.limit === 'requests'
        ? `${tier.requestsPerMinute} requests per minute`
        : `${tier.tokensPerMinute} tokens per minute (this request reserves ${reserve}${ask.maxTokens === undefined ? `: its prompt and room for a reply of up to ${reply} tokens, as it sets no ${name}` : ''})`
      throw new ApiError('rate_limit_exceeded', `Rate limit of the ${tier.name} tier reached: ${what}. Retry after ${refusalHeaders['retry-after']} s.`, { headers: refusalHeaders })
    }

    let reserved = reserve
    return new Permit({ headers, maxTokens, replyLimit: ask.maxTokens ?? (reply > 0 ? reply : null), totalLimit: tpm }, async (tokens, failed) => {
      await fromStore(this.store.settle({
        accountId: account.id,
        requestId,
        tokens: tokens ?? reserved,
        refundCall: failed,
        month,
      }))
    }, async extra => {
      const added = await fromStore(this.store.extend({ accountId: account.id, requestId, tokens: extra, tokensPerMinute: tpm }))
      if (added) reserved += extra
      return added
    })
  }

  /**
   * Refuses at once, with the admission's own 429, an account that is past a limit right now:
   * for the doors that must read or translate much (a stored conversation, a long Messages body)
   * before they know the request's size, so a key past its limit makes no such work. Counts
   * nothing: the request is still admitted (or refused) by admit() once its size is known.
   */
  async precheck (account: Account, model?: string): Promise<void> {
    const tier = this.tierOf(account)
    if (model !== undefined && !this.tiers.allowsModel(tier, model)) {
      throw new ApiError('model_not_allowed', `The ${tier.name} tier may not use the model '${model}'.`, { param: 'model' })
    }
    if (tier.requestsPerMinute === null && tier.tokensPerMinute === null && tier.callsPerMonth === null) return
    const month = monthOf(this.#now())
    const usage = await this.#fromStore(this.store.peek(account.id, month))
    const headers = rateLimitHeaders(tier, usage)
    if (tier.callsPerMonth !== null && usage.calls !== null && usage.calls >= tier.callsPerMonth) {
      throw new ApiError('allowance_exhausted',
        `This account has used its ${tier.callsPerMonth} calls for this month (${tier.name} tier); the allowance renews on ${new Date(month.endMs).toISOString().slice(0, 10)} (UTC).`,
        { headers: { ...headers, ...retryAfterHeaders(month.endMs - this.#now()) } })
    }
    const over = tier.requestsPerMinute !== null && usage.requests >= tier.requestsPerMinute
      ? { what: `${tier.requestsPerMinute} requests per minute`, resetMs: usage.requestsResetMs }
      : tier.tokensPerMinute !== null && usage.tokens >= tier.tokensPerMinute
        ? { what: `${tier.tokensPerMinute} tokens per minute`, resetMs: usage.tokensResetMs }
        : undefined
    if (over) {
      const refusalHeaders = { ...headers, ...retryAfterHeaders(over.resetMs) }
      throw new ApiError('rate_limit_exceeded', `Rate limit of the ${tier.name} tier reached: ${over.what}. Retry after ${refusalHeaders['retry-after']} s.`, { headers: refusalHeaders })
    }
  }

  /**
   * Counts one request that generates nothing (a token count, a stored response read) against the
   * tier's requests per minute: no tokens, no call of the monthly allowance. Throws the 429 of
   * admit() when the minute is used up; returns the x-ratelimit-* headers.
   */
  async countRequest (account: Account): Promise<Record<string, string>> {
    const tier = this.tierOf(account)
    if (tier.requestsPerMinute === null && tier.tokensPerMinute === null && tier.callsPerMonth === null) return {}
    const month = monthOf(this.#now())
    const requestId = randomUUID()
    // Counted as a request of the minute with no tokens; the allowance is not checked (nothing is generated).
    const result = await this.#admitInStore({ accountId: account.id, requestId, tokens: 0, rules: { ...rulesOf(tier), callsPerMonth: null }, month })
    const headers = rateLimitHeaders(tier, result.usage)
    if (result.outcome === 'refused') {
      const refusalHeaders = { ...headers, ...retryAfterHeaders(result.retryAfterMs) }
      const what = result.limit === 'requests' ? `${tier.requestsPerMinute} requests per minute` : `${tier.tokensPerMinute} tokens per minute`
      throw new ApiError('rate_limit_exceeded', `Rate limit of the ${tier.name} tier reached: ${what}. Retry after ${refusalHeaders['retry-after']} s.`, { headers: refusalHeaders })
    }
    // Its call of the month is given back at once: only the minute's request stays counted.
    await fromStore(this.store.settle({ accountId: account.id, requestId, tokens: 0, refundCall: true, month }))
    return headers
  }

  /**
   * The x-ratelimit-* headers for a response that counts nothing (models,
   * usage, refusals before the limits). Only informative, so for a moment after
   * the store failed they are not asked for at all: a refusal for an
   * unreachable Redis would otherwise wait on it a second time for its headers.
   */
  async headersFor (account: Account): Promise<Record<string, string>> {
    const tier = this.tierOf(account)
    if (tier.requestsPerMinute === null && tier.tokensPerMinute === null) return {}
    if (this.#now() < this.#storeDownUntil) throw limitsUnavailableError()
    return rateLimitHeaders(tier, await this.#fromStore(this.store.peek(account.id, monthOf(this.#now()))))
  }

  /** The store's admit, seeding the month's counter from the usage records when it does not exist yet. */
  async #admitInStore (request: AdmitRequest & { month: Month }): Promise<Exclude<AdmitResult, { outcome: 'needs-seed' }>> {
    const result = await this.#fromStore(this.store.admit(request))
    if (result.outcome !== 'needs-seed') return result
    // The month's counter does not exist yet (new month, restart, flushed Redis): start it from the records.
    const monthSeed = await this.#usage.billableCallsSince(request.accountId, new Date(request.month.startMs))
    const seeded = await this.#fromStore(this.store.admit({ ...request, monthSeed }))
    if (seeded.outcome === 'needs-seed') throw new Error('the limit store asked for a month seed twice')
    return seeded
  }

  /** fromStore, remembering a failure so headersFor can skip the store for a moment. */
  async #fromStore<T> (work: Promise<T>): Promise<T> {
    try {
      return await fromStore(work)
    } catch (err) {
      this.#storeDownUntil = this.#now() + STORE_DOWN_SKIP_MS
      throw err
    }
  }

  /** The account's tier, what it has used and what is left, without counting anything. */
  async limitsOf (account: Account): Promise<AccountLimits> {
    const tier = this.tierOf(account)
    const month = monthOf(this.#now())
    const usage = await this.#fromStore(this.store.peek(account.id, month))
    if (usage.calls === null) usage.calls = await this.#usage.billableCallsSince(account.id, new Date(month.startMs))
    return {
      tier,
      usage,
      month,
      callsRemaining: tier.callsPerMonth === null ? null : Math.max(0, tier.callsPerMonth - usage.calls),
      headers: rateLimitHeaders(tier, usage),
    }
  }
}
