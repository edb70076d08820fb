// The limits policy over the in-process store and a real SQLite database:
// tiers from their file, model access, the per-request cap, reservations,
// refusals with their headers, the allowance seeded from the usage records.

import { join } from 'node:path'
import t, { type Test } from 'tap'
import { Accounts, type Account } from '../../src/accounts/accounts.ts'
import { Tiers, TiersFileError } from '../../src/accounts/tiers.ts'
import { UsageRecords } from '../../src/accounts/usage-records.ts'
import { ApiError } from '../../src/errors.ts'
import { monthOf } from '../../src/limits/calendar.ts'
import { formatDuration, rateLimitHeaders, retryAfterHeaders } from '../../src/limits/headers.ts'
import { Limiter } from '../../src/limits/limiter.ts'
import { MemoryLimitStore } from '../../src/limits/memory-store.ts'
import { estimatePromptTokens } from '../../src/limits/request-cost.ts'
import { openMigratedDatabase } from '../../src/store/database.ts'

const TIERS = JSON.stringify({
  tiers: {
    free: { requests_per_minute: 3, tokens_per_minute: 1000, calls_per_month: 5, max_tokens_per_request: 100, models: ['stories*', 'scripted'] },
    pro: { requests_per_minute: 100, max_tokens_per_request: 4000 },
    unlimited: {},
  },
})

async function setup (t: Test, tier = 'free') {
  const db = await openMigratedDatabase({ kind: 'sqlite', path: join(t.testdir(), 'chatd.db') })
  t.teardown(() => db.destroy())
  const accounts = new Accounts(db)
  const usage = new UsageRecords(db)
  const account = await accounts.create({ email: 'a@example.com', tier })
  const limiter = new Limiter({ tiers: Tiers.parse(TIERS), store: new MemoryLimitStore(), usage })
  return { account, accounts, usage, limiter }
}

async function refusal (promise: Promise<unknown>): Promise<ApiError> {
  try {
    await promise
  } catch (err) {
    if (err instanceof ApiError) return err
    throw err
  }
  throw new Error('expected a refusal')
}

t.test('tiers file: defaults, null and absent limits, model patterns, fallback tier', async t => {
  const tiers = Tiers.parse(TIERS)
  t.same(tiers.names(), ['free', 'pro', 'unlimited'])
  t.equal(tiers.defaultName, 'free')
  t.same(tiers.get('pro'), { name: 'pro', requestsPerMinute: 100, tokensPerMinute: null, callsPerMonth: null, maxTokensPerRequest: 4000, models: ['*'], cachedPromptTokensWeight: 0.1 }, 'a cached prompt token counts a tenth unless the tier says')
  t.equal(Tiers.parse(JSON.stringify({ default: 'a', tiers: { a: { cached_prompt_tokens_weight: 0 } } })).get('a')?.cachedPromptTokensWeight, 0)
  t.throws(() => Tiers.parse(JSON.stringify({ default: 'a', tiers: { a: { cached_prompt_tokens_weight: 2 } } })), /cached_prompt_tokens_weight/)
  const free = tiers.get('free')!
  t.ok(tiers.allowsModel(free, 'stories260k'))
  t.ok(tiers.allowsModel(free, 'scripted'))
  t.notOk(tiers.allowsModel(free, 'scripted2'), 'a pattern matches the whole id')
  t.notOk(tiers.allowsModel(free, 'deepseek-r1-distill-qwen-1.5b'))
  t.ok(tiers.allowsModel(tiers.get('unlimited')!, 'anything.at-all'))
  t.ok(tiers.allowsModel(tiers.get('unlimited')!, 'a\nline\u2028break'), '"*" allows every id, line breaks included')
  t.equal(tiers.resolve('removed-tier').name, 'free', 'an account on a tier no longer in the file gets the default')

  const shipped = Tiers.fromFile(join(import.meta.dirname, '../../tiers.json'))
  t.same(shipped.get('free'), { name: 'free', requestsPerMinute: 10, tokensPerMinute: 20000, callsPerMonth: 1000, maxTokensPerRequest: 2048, models: ['*'], cachedPromptTokensWeight: 0.1 }, 'the shipped tiers.json has docs/design.md\'s free tier')
  t.ok(shipped.has('pro') && shipped.has('unlimited'))

  t.throws(() => Tiers.parse('{'), TiersFileError)
  t.throws(() => Tiers.parse('{"tiers":{"free":{"requests_per_minute":-1}}}'), /requests_per_minute/)
  t.throws(() => Tiers.parse('{"tiers":{"free":{"rpm":1}}}'), /tiers\.json/)
  t.throws(() => Tiers.parse('{"tiers":{"pro":{}}}'), /default tier "free" is not defined/)
  t.ok(Tiers.parse('{"default":"pro","tiers":{"pro":{}}}').has('pro'))
  t.throws(() => Tiers.fromFile('/nonexistent/tiers.json'), /TIERS_FILE \/nonexistent\/tiers.json: cannot be read/)
})

t.test('headers: OpenAI names, durations in Go notation, Retry-After rounded up', async t => {
  t.equal(formatDuration(0), '0ms')
  t.equal(formatDuration(250), '250ms')
  t.equal(formatDuration(1000), '1s')
  t.equal(formatDuration(17_500), '17.5s')
  t.equal(formatDuration(60_000), '1m0s')
  t.equal(formatDuration(90_250), '1m30.25s')
  t.equal(formatDuration(3_600_000 * 26 + 1000), '26h0m1s')
  const tiers = Tiers.parse(TIERS)
  const usage = { requests: 1, tokens: 300, calls: 2, requestsResetMs: 59_000, tokensResetMs: 59_000 }
  t.same(rateLimitHeaders(tiers.get('free')!, usage), {
    'x-ratelimit-limit-requests': '3',
    'x-ratelimit-remaining-requests': '2',
    'x-ratelimit-reset-requests': '59s',
    'x-ratelimit-limit-tokens': '1000',
    'x-ratelimit-remaining-tokens': '700',
    'x-ratelimit-reset-tokens': '59s',
  })
  t.same(Object.keys(rateLimitHeaders(tiers.get('pro')!, usage)), ['x-ratelimit-limit-requests', 'x-ratelimit-remaining-requests', 'x-ratelimit-reset-requests'], 'only the trios whose limits apply')
  t.same(rateLimitHeaders(tiers.get('unlimited')!, usage), {})
  t.same(retryAfterHeaders(59_001), { 'retry-after': '60', 'retry-after-ms': '59001' })
  t.same(retryAfterHeaders(0), { 'retry-after': '1', 'retry-after-ms': '1' })
})

t.test('prompt estimate: four characters a token, rounded up', async t => {
  t.equal(estimatePromptTokens([{ content: 'abcd' }, { content: 'e' }]), 2)
  t.equal(estimatePromptTokens([]), 0)
})

t.test('model access and the per-request cap come before any counting', async t => {
  const { account, limiter } = await setup(t)
  const denied = await refusal(limiter.admit(account, { model: 'deepseek-r1-distill-qwen-1.5b', promptTokens: 1 }))
  t.match(denied, { status: 403, code: 'model_not_allowed', param: 'model' })
  const capped = await refusal(limiter.admit(account, { model: 'scripted', maxTokens: 101, maxTokensName: 'max_completion_tokens', promptTokens: 1 }))
  t.match(capped, { status: 400, code: 'invalid_parameter', param: 'max_tokens', message: /^max_completion_tokens is 101; .*at most 100 tokens per request/ })
  const huge = await refusal(limiter.admit(account, { model: 'scripted', maxTokens: 50, promptTokens: 990 }))
  t.match(huge, { status: 400, code: 'invalid_parameter', message: /reserves 1040 tokens.*1000 tokens per minute/ })
  t.equal((await limiter.limitsOf(account)).usage.requests, 0, 'none of them counted')
})

t.test('max_tokens for the backend: the request\'s, else the cap unless the context is tighter', async t => {
  const { account, limiter } = await setup(t)
  t.equal((await limiter.admit(account, { model: 'scripted', maxTokens: 7, promptTokens: 1 })).maxTokens, 7)
  t.equal((await limiter.admit(account, { model: 'scripted', promptTokens: 1, contextLength: 512 })).maxTokens, 100)
  t.equal((await limiter.admit(account, { model: 'scripted', promptTokens: 1, contextLength: 64 })).maxTokens, undefined)
  const { usage } = await limiter.limitsOf(account)
  t.equal(usage.tokens, (1 + 7) + (1 + 100) + (1 + 63), 'each reserved its prompt estimate plus its reply\'s bound: max_tokens, else the cap, else the room its context leaves')
})

t.test('rate-limit refusal: 429 with Retry-After and the x-ratelimit headers', async t => {
  const { account, limiter } = await setup(t)
  for (let i = 0; i < 3; i++) {
    const permit = await limiter.admit(account, { model: 'scripted', maxTokens: 10, promptTokens: 2 })
    t.equal(permit.headers['x-ratelimit-remaining-requests'], String(2 - i))
    t.equal(permit.headers['x-ratelimit-remaining-tokens'], String(1000 - 12 * (i + 1)))
  }
  const refused = await refusal(limiter.admit(account, { model: 'scripted', maxTokens: 10, promptTokens: 2 }))
  t.match(refused, { status: 429, code: 'rate_limit_exceeded', type: 'rate_limit_error', message: /3 requests per minute/ })
  t.equal(refused.headers['retry-after'], '60')
  t.equal(refused.headers['x-ratelimit-remaining-requests'], '0')
  t.match(refused.headers['x-ratelimit-reset-requests'], /^(59(\.\d+)?s|1m0s)$/)
})

t.test('allowance: seeded from the usage records; the boundary call passes, the next is refused until the month ends', async t => {
  const { account, usage, limiter } = await setup(t, 'free')
  const base = { accountId: account.id, keyPrefix: 'sk-chatd-abcdef', model: 'scripted', promptTokens: 1, completionTokens: 1, errorCode: null, latencyMs: 1 }
  // Two billable calls earlier this month, one failed one (not billable), one last month.
  const month = monthOf(Date.now())
  await usage.record({ ...base, status: 'completed' })
  await usage.record({ ...base, status: 'cancelled' })
  await usage.record({ ...base, status: 'failed' })
  await usage.record({ ...base, status: 'completed', at: new Date(month.startMs - 1000) })
  const limits = await limiter.limitsOf(account)
  t.equal(limits.usage.calls, 2)
  t.equal(limits.callsRemaining, 3)

  const fast = new Limiter({ tiers: Tiers.parse(JSON.stringify({ tiers: { free: { calls_per_month: 5 } } })), store: new MemoryLimitStore(), usage })
  const permits = []
  for (let i = 0; i < 3; i++) permits.push(await fast.admit(account, { model: 'x', promptTokens: 1 }))
  const refused = await refusal(fast.admit(account, { model: 'x', promptTokens: 1 }))
  t.match(refused, { status: 429, code: 'allowance_exhausted', message: /used its 5 calls for this month/ })
  const expected = Math.ceil((month.endMs - Date.now()) / 1000)
  t.ok(Math.abs(Number(refused.headers['retry-after']) - expected) <= 1, `Retry-After is the month's end (${refused.headers['retry-after']} vs ${expected})`)

  await permits[0].settle(null, true)
  await permits[0].settle(null, true)
  t.equal((await fast.limitsOf(account)).callsRemaining, 1, 'a failed request gives its call back, once')
  await fast.admit(account, { model: 'x', promptTokens: 1 })
  t.equal((await fast.limitsOf(account)).callsRemaining, 0)
})

t.test('unlimited tier: no headers, no refusals', async t => {
  const { account, limiter } = await setup(t, 'unlimited')
  for (let i = 0; i < 20; i++) t.same((await limiter.admit(account, { model: 'anything', promptTokens: 1000 })).headers, {})
  t.same(await limiter.headersFor(account), {})
  t.equal((await limiter.limitsOf(account)).callsRemaining, null)
})

t.test('settling replaces the reservation with the real count', async t => {
  const { account, limiter } = await setup(t)
  const permit = await limiter.admit(account, { model: 'scripted', maxTokens: 100, promptTokens: 20 })
  t.equal((await limiter.limitsOf(account)).usage.tokens, 120)
  await permit.settle(37, false)
  t.equal((await limiter.limitsOf(account)).usage.tokens, 37)
  t.equal((await limiter.headersFor(account as Account))['x-ratelimit-remaining-tokens'], '963')
})

t.test('without max_tokens or a cap, a reply may use at most what tokens_per_minute leaves after the prompt', async t => {
  const { account, usage } = await setup(t)
  const tiers = Tiers.parse(JSON.stringify({ tiers: { free: { tokens_per_minute: 50 } } }))
  const limiter = new Limiter({ tiers, store: new MemoryLimitStore(), usage })
  const permit = await limiter.admit(account, { model: 'x', promptTokens: 4, contextLength: 2048 })
  t.equal(permit.maxTokens, 46, 'the backend is told the minute\'s budget less the prompt')
  t.equal((await limiter.limitsOf(account)).usage.tokens, 50, 'and that much is reserved')
  const busy = await refusal(limiter.admit(account, { model: 'x', promptTokens: 4, contextLength: 2048 }))
  t.match(busy, { status: 429, code: 'rate_limit_exceeded', message: /50 tokens per minute \(this request reserves 50: its prompt and room for a reply of up to 46 tokens, as it sets no max_tokens\)/ })
  await permit.settle(10, false)
  t.equal((await limiter.admit(account, { model: 'x', maxTokens: 36, promptTokens: 4, contextLength: 2048 })).maxTokens, 36, 'settled to the real count (10), the rest of the minute is free again')
  const full = await refusal(limiter.admit(account, { model: 'x', promptTokens: 50 }))
  t.match(full, { status: 400, code: 'invalid_parameter', param: 'messages', message: /prompt alone \(about 50 tokens\) leaves no room for a reply within the free tier's 50 tokens per minute/ })
  const unbounded = new Limiter({ tiers: Tiers.parse(JSON.stringify({ tiers: { free: { requests_per_minute: 5 } } })), store: new MemoryLimitStore(), usage })
  t.equal((await unbounded.admit(account, { model: 'x', promptTokens: 4, contextLength: 2048 })).maxTokens, undefined, 'no token limit: the model\'s context is the bound')
})
