// The x-ratelimit-* headers, in OpenAI's names and formats so clients that
// read OpenAI's headers read chatd's: limit and remaining as integers, reset
// as a duration such as "250ms", "17.5s" or "1m0s" (Go's duration notation,
// which OpenAI uses). A trio is sent only where its limit applies.

import type { Tier } from '../accounts/tiers.ts'
import type { Usage } from './store.ts'

export function formatDuration (ms: number): string {
  const total = Math.max(0, Math.ceil(ms))
  if (total < 1000) return `${total}ms`
  const hours = Math.floor(total / 3_600_000)
  const minutes = Math.floor((total % 3_600_000) / 60_000)
  const seconds = ((total % 60_000) / 1000).toFixed(3).replace(/\.?0+$/, '')
  return `${hours > 0 ? `${hours}h` : ''}${hours > 0 || minutes > 0 ? `${minutes}m` : ''}${seconds}s`
}

export function rateLimitHeaders (tier: Tier, usage: Usage): Record<string, string> {
  const headers: Record<string, string> = {}
  if (tier.requestsPerMinute !== null) {
    headers['x-ratelimit-limit-requests'] = String(tier.requestsPerMinute)
    headers['x-ratelimit-remaining-requests'] = String(Math.max(0, tier.requestsPerMinute - usage.requests))
    headers['x-ratelimit-reset-requests'] = formatDuration(usage.requestsResetMs)
  }
  if (tier.tokensPerMinute !== null) {
    headers['x-ratelimit-limit-tokens'] = String(tier.tokensPerMinute)
    headers['x-ratelimit-remaining-tokens'] = String(Math.max(0, tier.tokensPerMinute - usage.tokens))
    headers['x-ratelimit-reset-tokens'] = formatDuration(usage.tokensResetMs)
  }
  return headers
}

/** Retry-After in whole seconds (rounded up, at least 1), plus OpenAI's retry-after-ms for clients that honour it. */
export function retryAfterHeaders (ms: number): Record<string, string> {
  const wait = Math.max(1, Math.ceil(ms))
  return { 'retry-after': String(Math.ceil(wait / 1000)), 'retry-after-ms': String(wait) }
}
