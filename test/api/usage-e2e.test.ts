// Limits and usage end to end on the real model: `chatd serve` as server.ts
// starts it, the ONNX engine on stories260k, the official openai client.
// The allowance's boundary call succeeds and the next gets 429 until the
// month ends; the tokens-per-minute boundary (a reservation that exactly
// fills the minute) succeeds and one token more gets 429 until the first
// request leaves the minute; every usage row matches the usage its response
// reported, abandoned streams included.

import type { AddressInfo } from 'node:net'
import { join } from 'node:path'
import t from 'tap'
import OpenAI from 'openai'
import { Accounts } from '../../src/accounts/accounts.ts'
import { loadConfig } from '../../src/config.ts'
import { monthOf } from '../../src/limits/calendar.ts'
import { measureCharsPerToken } from '../../src/engine/chars-per-token.ts'
import { loadTokenizer } from '../../src/engine/onnx/text/tokenizer.ts'
import { estimatePromptTokens } from '../../src/limits/request-cost.ts'
import { startServer } from '../../src/server.ts'
import { openMigratedDatabase } from '../../src/store/database.ts'
import { storiesModelDir, storiesModelEntry } from '../helpers/models.ts'

const MODEL = 'stories260k'
const TPM = 100

const dir = t.testdir({
  'models.json': JSON.stringify({ models: [storiesModelEntry(MODEL)] }),
  'tiers.json': JSON.stringify({
    tiers: {
      free: {},
      monthly: { calls_per_month: 3, max_tokens_per_request: 64 },
      // Cached prompt tokens count in full here: this tier's test is the exact boundary, and every
      // request repeats the same prompt (the weight has its own test, below).
      tokens: { tokens_per_minute: TPM, max_tokens_per_request: 96, cached_prompt_tokens_weight: 1 },
      cached: { tokens_per_minute: 5000, max_tokens_per_request: 96 },
      unlimited: {},
    },
  }),
})
const database = { kind: 'sqlite' as const, path: join(dir, 'chatd.db') }
const db = await openMigratedDatabase(database)
t.teardown(() => db.destroy())
const accounts = new Accounts(db)
const keys: Record<string, string> = {}
for (const tier of ['monthly', 'tokens', 'cached', 'unlimited']) {
  const account = await accounts.create({ email: `${tier}@example.com`, tier })
  keys[tier] = (await accounts.createKey(account.id, { name: tier })).key
}

const app = await startServer(loadConfig({
  PORT: '0',
  LOG_LEVEL: 'silent',
  DATABASE_URL: `sqlite://${database.path}`,
  MODELS_FILE: join(dir, 'models.json'),
  TIERS_FILE: join(dir, 'tiers.json'),
  CHATD_AUTO_PULL: '0',
}), { print: () => {}, logger: false })
t.teardown(() => app.close())
const baseURL = `http://127.0.0.1:${(app.server.address() as AddressInfo).port}/api/v1`
const deadline = Date.now() + 60_000
while ((await app.inject({ url: '/readyz' })).statusCode !== 200) {
  if (Date.now() > deadline) throw new Error('the model did not become ready')
  await new Promise(resolve => setTimeout(resolve, 50))
}

// The client's default keep-alive agent: close() no longer waits on the connections it keeps
// open after the abandoned stream below (test/api/shutdown-e2e.test.ts).
const client = (tier: string) => new OpenAI({ apiKey: keys[tier], baseURL, maxRetries: 0 })
const messages = [{ role: 'user' as const, content: 'Once upon a time, there was a dog' }]
const tokenizer = await loadTokenizer(storiesModelDir())
/** The model's characters per token as chatd measures it at load (src/engine/chars-per-token.ts). */
const charsPerToken = measureCharsPerToken(text => tokenizer.encode(text).length)

async function rowsOf (tier: string) {
  return db.selectFrom('usage_records').innerJoin('accounts', 'accounts.id', 'usage_records.account_id')
    .select(['status', 'prompt_tokens', 'completion_tokens', 'error_code', 'model'])
    .where('accounts.email', '=', `${tier}@example.com`).orderBy('usage_records.id').execute()
}

t.test('allowance: the third of 3 calls succeeds, the fourth gets 429 allowance_exhausted until the month ends; rows match', async t => {
  const api = client('monthly')
  const first = await api.chat.completions.create({ model: MODEL, messages, max_tokens: 10, temperature: 0 })
  const stream = await api.chat.completions.create({ model: MODEL, messages, max_tokens: 10, temperature: 0, stream: true, stream_options: { include_usage: true } })
  let streamedUsage
  for await (const chunk of stream) if (chunk.usage) streamedUsage = chunk.usage
  const { data: boundary, response } = await api.chat.completions.create({ model: MODEL, messages, temperature: 0 }).withResponse()
  t.equal(boundary.usage!.completion_tokens <= 64, true, 'no max_tokens: the tier cap (64) bounds the reply')

  const refused = await api.chat.completions.create({ model: MODEL, messages, max_tokens: 10 }).catch((err: unknown) => err)
  t.ok(refused instanceof OpenAI.RateLimitError, '429')
  const error = refused as InstanceType<typeof OpenAI.RateLimitError>
  t.match(error.error, { code: 'allowance_exhausted', type: 'rate_limit_error' })
  const expected = (monthOf(Date.now()).endMs - Date.now()) / 1000
  t.ok(Math.abs(Number(error.headers.get('retry-after')) - expected) <= 2, `Retry-After ${error.headers.get('retry-after')} s is the start of next month (${Math.round(expected)} s)`)
  t.equal(response.headers.get('x-ratelimit-limit-requests'), null, 'no per-minute limits on this tier, so no per-minute headers')

  const usage = await api.get('/usage') as { used: { calls_this_month: number }; remaining: { calls_this_month: number } }
  t.match(usage, { used: { calls_this_month: 3 }, remaining: { calls_this_month: 0 } })
  const rows = await rowsOf('monthly')
  t.same(rows.map(r => [r.status, r.prompt_tokens, r.completion_tokens]), [
    ['completed', first.usage!.prompt_tokens, first.usage!.completion_tokens],
    ['completed', streamedUsage!.prompt_tokens, streamedUsage!.completion_tokens],
    ['completed', boundary.usage!.prompt_tokens, boundary.usage!.completion_tokens],
  ], 'one row per call, with the usage the responses reported; none for the refusal')
})

t.test('tokens per minute: a reservation that exactly fills the minute passes; one token more waits for the first request to leave', async t => {
  const api = client('tokens')
  // The reservation divides the prompt's characters by the model's own characters per token.
  const estimate = estimatePromptTokens(messages, charsPerToken)
  const started = Date.now()
  const { data: one, response: r1 } = await api.chat.completions.create({ model: MODEL, messages, max_tokens: 20, temperature: 0 }).withResponse()
  t.equal(r1.headers.get('x-ratelimit-limit-tokens'), String(TPM))
  t.equal(r1.headers.get('x-ratelimit-remaining-tokens'), String(TPM - estimate - 20), 'reserved: prompt estimate + max_tokens')
  const afterOne = TPM - one.usage!.total_tokens

  // Reserve exactly what is left: estimate + max_tokens == the remaining tokens.
  const { data: two, response: r2 } = await api.chat.completions.create({ model: MODEL, messages, max_tokens: afterOne - estimate, temperature: 0 }).withResponse()
  t.equal(r2.headers.get('x-ratelimit-remaining-tokens'), '0', 'the boundary request filled the minute and passed')
  const afterTwo = Math.max(0, afterOne - two.usage!.total_tokens)

  const over = await api.chat.completions.create({ model: MODEL, messages, max_tokens: Math.max(1, afterTwo - estimate + 1) }).catch((err: unknown) => err)
  t.ok(over instanceof OpenAI.RateLimitError, 'one token more: 429')
  const error = over as InstanceType<typeof OpenAI.RateLimitError>
  t.match(error.error, { code: 'rate_limit_exceeded', message: /100 tokens per minute/ })
  const retryAfter = Number(error.headers.get('retry-after'))
  const untilFirstLeaves = 60 - (Date.now() - started) / 1000
  t.ok(retryAfter >= untilFirstLeaves - 1 && retryAfter <= 60, `Retry-After ${retryAfter} s: when the first request leaves the minute (~${untilFirstLeaves.toFixed(1)} s)`)
  t.equal(error.headers.get('x-ratelimit-remaining-tokens'), String(afterTwo))

  const usage = await api.get('/usage') as { used: { tokens_this_minute: number } }
  t.equal(usage.used.tokens_this_minute, one.usage!.total_tokens + two.usage!.total_tokens, 'the minute holds the real counts')
  const rows = await rowsOf('tokens')
  t.same(rows.map(r => [r.prompt_tokens, r.completion_tokens]), [
    [one.usage!.prompt_tokens, one.usage!.completion_tokens],
    [two.usage!.prompt_tokens, two.usage!.completion_tokens],
  ])
})

t.test('the next turn of a conversation: its cached prompt counts a tenth, in the reservation and in the minute', async t => {
  // An agent resends its whole conversation each turn; the account's prefix cache serves all
  // but the new message, and the tier (cached_prompt_tokens_weight, default 0.1) counts those
  // tokens at a tenth: guessed from the account's previous request when reserving, then as the
  // engine reports them (prompt_tokens_details.cached_tokens).
  const api = client('cached')
  const system = { role: 'system' as const, content: 'You tell short stories to children about animals who live in a small town by the sea.' }
  const first = [system, { role: 'user' as const, content: 'Tell me about a cat.' }]
  const { data: one } = await api.chat.completions.create({ model: MODEL, messages: first, max_tokens: 20, temperature: 0 }).withResponse()
  const afterOne = 5000 - one.usage!.total_tokens // nothing was cached yet: all of it counts

  const next = [...first, { role: 'assistant' as const, content: one.choices[0].message.content! }, { role: 'user' as const, content: 'And a dog?' }]
  const chars = (list: Array<{ content: string }>) => list.reduce((n, m) => n + m.content.length, 0)
  const reserved = Math.ceil((chars(next) - chars(first) * 0.9) / charsPerToken!) + 20
  const { data: two, response } = await api.chat.completions.create({ model: MODEL, messages: next, max_tokens: 20, temperature: 0 }).withResponse()
  t.equal(response.headers.get('x-ratelimit-remaining-tokens'), String(afterOne - reserved),
    `reserved: the repeated messages at a tenth, the new ones in full, plus max_tokens (${reserved} of a full ${Math.ceil(chars(next) / charsPerToken!) + 20})`)
  const cached = two.usage!.prompt_tokens_details?.cached_tokens ?? 0
  t.ok(cached >= one.usage!.prompt_tokens, `the first turn's prompt came from the cache (${cached} of ${two.usage!.prompt_tokens})`)
  const usage = await api.get('/usage') as { used: { tokens_this_minute: number } }
  t.equal(usage.used.tokens_this_minute, one.usage!.total_tokens + Math.ceil(two.usage!.total_tokens - cached * 0.9), 'the minute counts the cached tokens at a tenth')
})

t.test('an abandoned stream gets a cancelled row with the tokens generated before it stopped', async t => {
  const api = client('unlimited')
  const stream = await api.chat.completions.create({ model: MODEL, messages, temperature: 0, stream: true })
  let pieces = 0
  for await (const chunk of stream) {
    if (chunk.choices[0]?.delta.content) pieces++
    if (pieces >= 3) break // leaving the loop aborts the request
  }
  const deadline = Date.now() + 10_000
  while ((await rowsOf('unlimited')).length === 0 && Date.now() < deadline) await new Promise(resolve => setTimeout(resolve, 20))
  const [row] = await rowsOf('unlimited')
  t.match(row, { status: 'cancelled', model: MODEL, error_code: null })
  t.ok(row.prompt_tokens > 0, 'prompt tokens counted')
  t.ok(row.completion_tokens >= 3 && row.completion_tokens < 200, `completion tokens up to the stop (${row.completion_tokens})`)
})
