// The usage report of one account: what GET /api/v1/usage returns and what
// the dashboard shows, built in one place so the two always agree.

import type { Account } from '../../accounts/accounts.ts'
import type { UsageRecords } from '../../accounts/usage-records.ts'
import { formatDuration } from '../../limits/headers.ts'
import type { Limiter } from '../../limits/limiter.ts'
import type { UsageReport } from './schema.ts'

const remaining = (limit: number | null, used: number): number | null => limit === null ? null : Math.max(0, limit - used)

export async function usageReport (account: Account, limiter: Limiter, usage: UsageRecords): Promise<UsageReport> {
  const [limits, daily] = await Promise.all([limiter.limitsOf(account), usage.daily(account.id, 30)])
  const { tier, usage: used, month } = limits
  const calls = used.calls ?? 0
  return {
    object: 'usage',
    account: { email: account.email, tier: account.tier },
    limits: {
      tier: tier.name,
      requests_per_minute: tier.requestsPerMinute,
      tokens_per_minute: tier.tokensPerMinute,
      calls_per_month: tier.callsPerMonth,
      max_tokens_per_request: tier.maxTokensPerRequest,
      models: tier.models,
    },
    used: { requests_this_minute: used.requests, tokens_this_minute: used.tokens, calls_this_month: calls },
    remaining: {
      requests_this_minute: remaining(tier.requestsPerMinute, used.requests),
      tokens_this_minute: remaining(tier.tokensPerMinute, used.tokens),
      calls_this_month: remaining(tier.callsPerMonth, calls),
    },
    resets: {
      requests: formatDuration(used.requestsResetMs),
      tokens: formatDuration(used.tokensResetMs),
      allowance: new Date(month.endMs).toISOString(),
    },
    daily,
  }
}
