// Per-account figures without a cardinality bomb (METRICS_ACCOUNTS_TOP): at
// most N accounts have series of their own, labelled with the account's id (a
// number; never a key, a prefix or an email), and every other account's
// traffic is summed under account="other". N is the cap on an account label's
// values, whatever the number of accounts or what they send.
//
// Which accounts: the first N that use the server get the places; then, every
// window (10 minutes), the places go to the N accounts that used the most in
// that window (tokens, plus one per request or refusal), the holders winning
// ties. An account that loses its place loses its series (Prometheus marks them
// stale); one that wins a place starts its series at zero, its earlier traffic
// staying in "other". So while at most N accounts are active, each account's
// series count exactly what its usage rows hold. The window's tally is itself
// bounded (Space-Saving: past its size, the smallest entry makes room), so a
// flood of new accounts costs a fixed amount of memory.

import { Counter, type Registry } from 'prom-client'
import { ACCOUNTS_TOP_MAX } from '../../config.ts'
import type { Usage } from '../../engine/backend.ts'
import type { UsageStatus } from '../../store/schema.ts'

const WINDOW_MS = 10 * 60_000
export const OTHER = 'other'

type Series = Map<string, { labels: Record<string, string>; value: number }>

/** A family whose series chatd keeps itself (so a series can be dropped), rendered at scrape time. */
class AccountFamily {
  readonly series: Series = new Map()

  constructor (registry: Registry, name: string, help: string, extra: string[]) {
    const series = this.series
    // eslint-disable-next-line no-new
    new Counter({
      name,
      help,
      labelNames: ['model_name', 'account', ...extra],
      registers: [registry],
      collect () {
        this.reset()
        for (const { labels, value } of series.values()) this.inc(labels, value)
      },
    })
  }

  add (labels: Record<string, string>, value: number): void {
    const key = JSON.stringify(labels)
    const entry = this.series.get(key)
    if (entry) entry.value += value
    else this.series.set(key, { labels, value })
  }

  drop (account: string): void {
    for (const [key, { labels }] of this.series) if (labels.account === account) this.series.delete(key)
  }
}

export class AccountMetrics {
  readonly top: number
  readonly #now: () => number
  readonly #windowMs: number
  /** Accounts with series of their own. */
  readonly #named = new Set<string>()
  /** This window's use per account, bounded (Space-Saving). */
  readonly #window = new Map<string, number>()
  readonly #windowSize: number
  #windowEnd: number
  readonly #families: AccountFamily[]
  readonly #prompt: AccountFamily
  readonly #generated: AccountFamily
  readonly #cached: AccountFamily
  readonly #requests: AccountFamily
  readonly #refusals: AccountFamily

  constructor (registry: Registry, opts: { top: number; now?: () => number; windowMs?: number }) {
    this.top = Math.max(0, Math.min(ACCOUNTS_TOP_MAX, opts.top))
    this.#now = opts.now ?? Date.now
    this.#windowMs = opts.windowMs ?? WINDOW_MS
    this.#windowEnd = this.#now() + this.#windowMs
    this.#windowSize = Math.max(64, 4 * this.top)
    this.#prompt = new AccountFamily(registry, 'chatd_account_prompt_tokens_total', 'METRICS_ACCOUNTS_TOP: prompt tokens of requests that ended, by account id (the top accounts; "other" for the rest).', [])
    this.#generated = new AccountFamily(registry, 'chatd_account_generation_tokens_total', 'METRICS_ACCOUNTS_TOP: tokens generated for requests that ended, by account id.', [])
    this.#cached = new AccountFamily(registry, 'chatd_account_prefix_cache_hits_total', 'METRICS_ACCOUNTS_TOP: prompt tokens served from a prefix cache (usage\'s cached_tokens), by account id.', [])
    this.#requests = new AccountFamily(registry, 'chatd_account_requests_total', 'METRICS_ACCOUNTS_TOP: requests whose usage row was written, by account id and status (`completed`, `failed`, `cancelled`): the usage rows\' own count.', ['status'])
    this.#refusals = new AccountFamily(registry, 'chatd_account_refusals_total', 'METRICS_ACCOUNTS_TOP: requests for a configured model refused before generation, by account id and reason (the error code).', ['reason'])
    this.#families = [this.#prompt, this.#generated, this.#cached, this.#requests, this.#refusals]
  }

  /** A request whose usage row was written. */
  ended (accountId: number, model: string, status: UsageStatus, usage: Usage | undefined): void {
    if (this.top === 0) return
    const tokens = usage ? usage.prompt_tokens + usage.completion_tokens : 0
    const labels = { model_name: model, account: this.#labelFor(String(accountId), tokens + 1) }
    this.#requests.add({ ...labels, status }, 1)
    if (!usage) return
    this.#prompt.add(labels, usage.prompt_tokens)
    this.#generated.add(labels, usage.completion_tokens)
    this.#cached.add(labels, usage.prompt_tokens_details?.cached_tokens ?? 0)
  }

  /** A request refused before generation. */
  refused (accountId: number, model: string, reason: string): void {
    if (this.top === 0) return
    this.#refusals.add({ model_name: model, account: this.#labelFor(String(accountId), 1), reason }, 1)
  }

  /** The account's label: its id while it holds a place, else "other". */
  #labelFor (account: string, weight: number): string {
    if (this.#now() >= this.#windowEnd) this.#rebalance()
    this.#tally(account, weight)
    if (this.#named.has(account)) return account
    if (this.#named.size < this.top) {
      this.#named.add(account)
      return account
    }
    return OTHER
  }

  #tally (account: string, weight: number): void {
    const held = this.#window.get(account)
    if (held !== undefined) {
      this.#window.set(account, held + weight)
      return
    }
    if (this.#window.size < this.#windowSize) {
      this.#window.set(account, weight)
      return
    }
    // Space-Saving: the smallest entry makes room, and the newcomer inherits its count (an upper bound of its own).
    let smallest: string | undefined
    for (const [key, n] of this.#window) if (smallest === undefined || n < this.#window.get(smallest)!) smallest = key
    const floor = this.#window.get(smallest!)!
    this.#window.delete(smallest!)
    this.#window.set(account, floor + weight)
  }

  /** The window is over: the places go to its N largest users; the holders win ties. */
  #rebalance (): void {
    const ranked = [...new Set([...this.#named, ...this.#window.keys()])]
      .map(account => ({ account, used: this.#window.get(account) ?? 0, held: this.#named.has(account) }))
      .sort((a, b) => b.used - a.used || Number(b.held) - Number(a.held))
    const keep = new Set(ranked.slice(0, this.top).filter(r => r.used > 0 || r.held).map(r => r.account))
    for (const account of this.#named) {
      if (keep.has(account)) continue
      this.#named.delete(account)
      for (const family of this.#families) family.drop(account)
    }
    for (const account of keep) this.#named.add(account)
    this.#window.clear()
    const now = this.#now()
    // A server idle for several windows starts one now.
    this.#windowEnd = now + this.#windowMs
  }
}
