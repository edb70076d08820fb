// The Redis limit store (REDIS_URL): one count for every replica. The scripts
// in redis-scripts.ts do the work atomically; this class names the keys,
// passes the rules, and turns the replies into the store's types.

import { Redis } from 'ioredis'
import { ADMIT, EXTEND, PEEK, SETTLE } from './redis-scripts.ts'
import { WINDOW_MS, type AdmitRequest, type AdmitResult, type Limit, type LimitStore, type MonthRef, type SettleRequest, type Usage, type ExtendRequest } from './store.ts'

type AdmitVerdict = [status: string, retryAfterMs: number, requests: number, tokens: number, calls: number, resetMs: number]
type AdmitReply = AdmitVerdict | ['seed']
type PeekReply = [number, number, number, number]

interface ScriptedRedis extends Redis {
  chatdAdmit (...args: Array<string | number>): Promise<AdmitReply>
  chatdSettle (...args: Array<string | number>): Promise<number>
  chatdPeek (...args: Array<string | number>): Promise<PeekReply>
  chatdExtend (...args: Array<string | number>): Promise<number>
}

/** -1 is the scripts' "no such limit". */
const arg = (limit: number | null): number => limit ?? -1

export class RedisLimitStore implements LimitStore {
  readonly kind = 'redis'
  readonly #redis: ScriptedRedis
  readonly #prefix: string
  readonly #ownsConnection: boolean
  readonly #windowMs: number

  /**
   * `redis` is shared with other users (the login throttle) unless
   * `ownsConnection`, which makes close() quit it. `windowMs` is 60 s; tests
   * shorten it to watch entries leave.
   */
  constructor (redis: Redis, opts: { prefix?: string; ownsConnection?: boolean; windowMs?: number } = {}) {
    this.#prefix = opts.prefix ?? 'chatd:'
    this.#windowMs = opts.windowMs ?? WINDOW_MS
    this.#ownsConnection = opts.ownsConnection ?? false
    // defineCommand sends EVALSHA and falls back to EVAL once per connection when Redis lacks the script.
    redis.defineCommand('chatdAdmit', { numberOfKeys: 3, lua: ADMIT })
    redis.defineCommand('chatdSettle', { numberOfKeys: 3, lua: SETTLE })
    redis.defineCommand('chatdPeek', { numberOfKeys: 3, lua: PEEK })
    redis.defineCommand('chatdExtend', { numberOfKeys: 2, lua: EXTEND })
    this.#redis = redis as ScriptedRedis
  }

  #keys (accountId: number, month: MonthRef): [string, string, string] {
    const k = `${this.#prefix}{a:${accountId}}`
    return [`${k}:win`, `${k}:tok`, `${k}:m:${month.id}`]
  }

  async admit (r: AdmitRequest): Promise<AdmitResult> {
    const reply = await this.#redis.chatdAdmit(
      ...this.#keys(r.accountId, r.month),
      this.#windowMs, r.requestId, r.tokens,
      arg(r.rules.requestsPerMinute), arg(r.rules.tokensPerMinute), arg(r.rules.callsPerMonth),
      r.monthSeed ?? -1, r.month.endMs
    )
    if (reply[0] === 'seed') return { outcome: 'needs-seed' }
    const [status, retryAfterMs, requests, tokens, calls, reset] = reply as AdmitVerdict
    const usage: Usage = { requests, tokens, calls: calls < 0 ? null : calls, requestsResetMs: reset, tokensResetMs: reset }
    if (status === 'ok') return { outcome: 'admitted', usage }
    return { outcome: 'refused', limit: status as Limit, retryAfterMs, usage }
  }

  async settle (r: SettleRequest): Promise<void> {
    await this.#redis.chatdSettle(...this.#keys(r.accountId, r.month), this.#windowMs, r.requestId, r.tokens, r.refundCall ? 1 : 0)
  }

  async extend (r: ExtendRequest): Promise<boolean> {
    const k = `${this.#prefix}{a:${r.accountId}}`
    return await this.#redis.chatdExtend(`${k}:win`, `${k}:tok`, this.#windowMs, r.requestId, r.tokens, arg(r.tokensPerMinute)) === 1
  }

  async peek (accountId: number, month: MonthRef): Promise<Usage> {
    const [requests, tokens, calls, reset] = await this.#redis.chatdPeek(...this.#keys(accountId, month), this.#windowMs)
    return { requests, tokens, calls: calls < 0 ? null : calls, requestsResetMs: reset, tokensResetMs: reset }
  }

  async close (): Promise<void> {
    if (this.#ownsConnection) await this.#redis.quit().catch(() => this.#redis.disconnect())
  }
}
