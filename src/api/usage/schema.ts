// GET /api/v1/usage: the account's tier, its limits, what is used and left,
// and daily totals for the last 30 days. Limits that do not apply are null.

import { Type, type Static } from 'typebox'

const Nullable = (description: string) => Type.Union([Type.Integer(), Type.Null()], { description })

export const DailyUsage = Type.Object({
  date: Type.String({ description: 'UTC day, YYYY-MM-DD.' }),
  calls: Type.Integer(),
  prompt_tokens: Type.Integer(),
  completion_tokens: Type.Integer(),
  total_tokens: Type.Integer(),
})

export const UsageReport = Type.Object({
  object: Type.Literal('usage'),
  account: Type.Object({ email: Type.String(), tier: Type.String() }),
  limits: Type.Object({
    tier: Type.String({ description: 'The tier whose limits apply (the default tier when the account\'s is no longer configured).' }),
    requests_per_minute: Nullable('Chat completions per rolling minute.'),
    tokens_per_minute: Nullable('Prompt + completion tokens per rolling minute.'),
    calls_per_month: Nullable('Chat completions per calendar month (UTC).'),
    max_tokens_per_request: Nullable('The most tokens one request may ask for.'),
    models: Type.Array(Type.String(), { description: 'Model ids the tier may use; "*" matches anything.' }),
  }),
  used: Type.Object({
    requests_this_minute: Type.Integer(),
    tokens_this_minute: Type.Integer({ description: 'Reserved by requests in progress, real counts for finished ones.' }),
    calls_this_month: Type.Integer(),
  }),
  remaining: Type.Object({
    requests_this_minute: Nullable('null when the tier has no such limit.'),
    tokens_this_minute: Nullable('null when the tier has no such limit.'),
    calls_this_month: Nullable('null when the tier has no allowance.'),
  }),
  resets: Type.Object({
    requests: Type.String({ description: 'Until the oldest counted request leaves the rolling minute, e.g. "12.5s".' }),
    tokens: Type.String(),
    allowance: Type.String({ description: 'When the monthly allowance renews (ISO 8601, UTC).' }),
  }),
  daily: Type.Array(DailyUsage, { description: 'The last 30 UTC days, oldest first, today last; days without calls are zeros.' }),
})

export type UsageReport = Static<typeof UsageReport>
