// Limits and usage through the HTTP API, with the in-test backend (only the
// plumbing is under test here; usage-e2e.test.ts does the same on the real
// model): headers on every response, refusals before any generation, the
// per-request cap, one usage row per request however it ends, and
// GET /api/v1/usage.

import http from 'node:http'
import { once } from 'node:events'
import type { AddressInfo } from 'node:net'
import t from 'tap'
import { loadConfig } from '../../src/config.ts'
import { ApiError } from '../../src/errors.ts'
import { monthOf } from '../../src/limits/calendar.ts'
import { buildTestApp, chatBody, type TestApp } from '../helpers/app.ts'
import { ScriptedBackend } from '../helpers/scripted-backend.ts'
import { TOOL_FORMATS, type ToolCallFormat } from '../../src/engine/tools/format.ts'

const CHAT = '/api/v1/chat/completions'

const TIERS = JSON.stringify({
  tiers: {
    free: { requests_per_minute: 3, tokens_per_minute: 1000, calls_per_month: 100, max_tokens_per_request: 50, models: ['scripted'] },
    monthly: { calls_per_month: 2 },
    tokens: { tokens_per_minute: 60, max_tokens_per_request: 20 },
    unlimited: {},
  },
})

async function rows (test: TestApp) {
  return test.db.selectFrom('usage_records').selectAll().orderBy('id').execute()
}

/** A limit store clock that stands still: every entry is a whole minute from leaving. */
const stillClock = () => {
  const now = Date.now()
  return () => now
}

t.test('x-ratelimit-* on successes, on other endpoints and on refusals; 429 after N requests with Retry-After', async t => {
  const test = await buildTestApp(t, { tier: 'free', tiers: TIERS, limitsNow: stillClock() })
  const { app, auth } = test
  const first = await app.inject({ method: 'POST', url: CHAT, headers: auth, payload: chatBody({ max_tokens: 10 }) })
  t.equal(first.statusCode, 200)
  t.match(first.headers, {
    'x-ratelimit-limit-requests': '3',
    'x-ratelimit-remaining-requests': '2',
    'x-ratelimit-reset-requests': '1m0s',
    'x-ratelimit-limit-tokens': '1000',
    // Reserved 4 (prompt estimate) + 10 (max_tokens), settled with the real 4 + 4.
    'x-ratelimit-remaining-tokens': '986',
  })
  const models = await app.inject({ url: '/api/v1/models', headers: auth })
  t.match(models.headers, { 'x-ratelimit-remaining-requests': '2', 'x-ratelimit-remaining-tokens': '992' }, 'reads count nothing; the settled count shows')
  const invalid = await app.inject({ method: 'POST', url: CHAT, headers: auth, payload: chatBody({ temperature: 9 }) })
  t.equal(invalid.statusCode, 400)
  t.equal(invalid.headers['x-ratelimit-remaining-requests'], '2', 'an invalid request is refused before the limits and counts nothing')

  for (let i = 0; i < 2; i++) t.equal((await app.inject({ method: 'POST', url: CHAT, headers: auth, payload: chatBody() })).statusCode, 200)
  const refused = await app.inject({ method: 'POST', url: CHAT, headers: auth, payload: chatBody() })
  t.equal(refused.statusCode, 429)
  t.match(refused.json(), { error: { type: 'rate_limit_error', code: 'rate_limit_exceeded', param: null } })
  const retryAfter = Number(refused.headers['retry-after'])
  t.equal(retryAfter, 60, 'Retry-After: until the first of the 3 leaves the minute')
  t.equal(refused.headers['x-ratelimit-remaining-requests'], '0')
  t.equal((await rows(test)).length, 3, 'the refused request has no usage row')
})

t.test('a model outside the tier: 403 model_not_allowed, before any generation', async t => {
  const other = new ScriptedBackend({ id: 'other' })
  const test = await buildTestApp(t, { tier: 'free', tiers: TIERS, backends: [new ScriptedBackend(), other] })
  const res = await test.app.inject({ method: 'POST', url: CHAT, headers: test.auth, payload: chatBody({ model: 'other' }) })
  t.equal(res.statusCode, 403)
  t.match(res.json(), { error: { type: 'permission_error', code: 'model_not_allowed', param: 'model' } })
  t.equal(other.lastRequest, undefined, 'the backend never saw it')
  t.equal(res.headers['x-ratelimit-remaining-requests'], '3')
})

t.test('a model that does not exist: 404 at every door, before the tier\'s models are read', async t => {
  // The Messages door and a Responses chain check the tier before translating; a model nobody
  // serves is still "does not exist" there, as at the chat door, not "the tier may not use it".
  const test = await buildTestApp(t, { tier: 'free', tiers: TIERS })
  const asks = [
    { url: CHAT, payload: chatBody({ model: 'claude-sonnet-4-5' }) },
    { url: '/api/v1/messages', payload: { model: 'claude-sonnet-4-5', max_tokens: 8, messages: [{ role: 'user', content: 'Hi' }] } },
    { url: '/api/v1/responses', payload: { model: 'claude-sonnet-4-5', input: 'Hi', previous_response_id: 'resp_missing' } },
    { url: '/api/v1/responses', payload: { model: 'a\nb', input: 'Hi' } },
  ]
  for (const { url, payload } of asks) {
    const res = await test.app.inject({ method: 'POST', url, headers: test.auth, payload })
    t.equal(res.statusCode, 404, `${url} ${JSON.stringify(payload.model)}`)
    t.match(res.payload, /does not exist/)
  }
  const messages = await test.app.inject({ method: 'POST', url: '/api/v1/messages', headers: test.auth, payload: { model: 'a\nb', max_tokens: 8, messages: [{ role: 'user', content: 'Hi' }] } })
  t.match(messages.json(), { type: 'error', error: { type: 'not_found_error' } }, 'in Anthropic\'s shape at its door')
})

t.test('the per-request cap: 400 above it; without max_tokens the backend gets the cap', async t => {
  const backend = new ScriptedBackend()
  const test = await buildTestApp(t, { tier: 'free', tiers: TIERS, backends: [backend] })
  const over = await test.app.inject({ method: 'POST', url: CHAT, headers: test.auth, payload: chatBody({ max_completion_tokens: 51 }) })
  t.equal(over.statusCode, 400)
  t.match(over.json(), { error: { code: 'invalid_parameter', param: 'max_completion_tokens', message: /at most 50 tokens per request/ } })
  t.equal(backend.lastRequest, undefined)
  t.equal((await test.app.inject({ method: 'POST', url: CHAT, headers: test.auth, payload: chatBody() })).statusCode, 200)
  t.equal(backend.lastRequest!.maxTokens, 50, 'the cap became max_tokens')
  await test.app.inject({ method: 'POST', url: CHAT, headers: test.auth, payload: chatBody({ max_tokens: 7 }) })
  t.equal(backend.lastRequest!.maxTokens, 7)
})

t.test('monthly allowance: the boundary call succeeds, the next gets 429 allowance_exhausted until the month ends; failures do not count', async t => {
  const refusing = new ScriptedBackend({ id: 'refusing', refuse: new ApiError('context_length_exceeded', 'too long') })
  const test = await buildTestApp(t, { tier: 'monthly', tiers: TIERS, backends: [new ScriptedBackend(), refusing] })
  const { app, auth } = test
  const failed = await app.inject({ method: 'POST', url: CHAT, headers: auth, payload: chatBody({ model: 'refusing' }) })
  t.equal(failed.statusCode, 400)
  t.equal((await app.inject({ method: 'POST', url: CHAT, headers: auth, payload: chatBody() })).statusCode, 200)
  const boundary = await app.inject({ method: 'POST', url: CHAT, headers: auth, payload: chatBody({ stream: true }) })
  t.equal(boundary.statusCode, 200, 'the second call of 2 succeeds (the failed one gave its call back)')
  const refused = await app.inject({ method: 'POST', url: CHAT, headers: auth, payload: chatBody() })
  t.equal(refused.statusCode, 429)
  t.match(refused.json(), { error: { code: 'allowance_exhausted', type: 'rate_limit_error' } })
  const expected = (monthOf(Date.now()).endMs - Date.now()) / 1000
  t.ok(Math.abs(Number(refused.headers['retry-after']) - expected) <= 2, `Retry-After ${refused.headers['retry-after']} s is the month's end`)

  const report = (await app.inject({ url: '/api/v1/usage', headers: auth })).json()
  t.match(report, { limits: { tier: 'monthly', calls_per_month: 2 }, used: { calls_this_month: 2 }, remaining: { calls_this_month: 0 } })
  t.same((await rows(test)).map(r => [r.status, r.error_code]), [['failed', 'context_length_exceeded'], ['completed', null], ['completed', null]])
})

t.test('tokens per minute: reservations from max_tokens hold while requests run; the boundary passes, the next waits for the tokens to free', async t => {
  // The replies wait at the gate until the test opens it: both are running while the third arrives.
  let open!: () => void
  const gate = new Promise<void>(resolve => { open = resolve })
  const slow = new ScriptedBackend({ words: ['a', 'b'], firstGate: gate })
  const test = await buildTestApp(t, { tier: 'tokens', tiers: TIERS, backends: [slow], limitsNow: stillClock() })
  const { app, auth } = test
  // 40 characters: a prompt estimate of 10, plus max_tokens 20: each request reserves 30 of the 60.
  const body = chatBody({ messages: [{ role: 'user', content: 'x'.repeat(40) }], max_tokens: 20 })
  const a = app.inject({ method: 'POST', url: CHAT, headers: auth, payload: body })
  await slow.whenRunning(1)
  const b = app.inject({ method: 'POST', url: CHAT, headers: auth, payload: body })
  await slow.whenRunning(2)
  const c = await app.inject({ method: 'POST', url: CHAT, headers: auth, payload: body })
  t.equal(slow.running, 2, 'both earlier requests were still running')
  t.equal(c.statusCode, 429, 'a third reservation of 30 does not fit beside two running ones')
  t.match(c.json(), { error: { code: 'rate_limit_exceeded', message: /60 tokens per minute \(this request reserves 30\)/ } })
  t.equal(c.headers['x-ratelimit-remaining-tokens'], '0')
  t.equal(c.headers['retry-after'], '60', 'Retry-After: when the first reservation leaves the minute')

  open()
  const [ra, rb] = await Promise.all([a, b])
  t.equal(ra.statusCode, 200)
  t.equal(rb.statusCode, 200, 'the boundary request (exactly 60 reserved) passed')
  t.equal(ra.headers['x-ratelimit-remaining-tokens'], '30')
  t.equal(rb.headers['x-ratelimit-remaining-tokens'], '0')
  t.same(ra.json().usage, { prompt_tokens: 1, completion_tokens: 2, total_tokens: 3 })

  const models = await app.inject({ url: '/api/v1/models', headers: auth })
  const settled = ra.json().usage.total_tokens + rb.json().usage.total_tokens
  t.equal(models.headers['x-ratelimit-remaining-tokens'], String(60 - settled), `both settled with their real counts (${settled} in all)`)
  const d = await app.inject({ method: 'POST', url: CHAT, headers: auth, payload: body })
  t.equal(d.statusCode, 200, 'room again once the real counts replaced the reservations')
  const over = await app.inject({ method: 'POST', url: CHAT, headers: auth, payload: chatBody({ max_tokens: 21 }) })
  t.match(over.json(), { error: { code: 'invalid_parameter', param: 'max_tokens' } }, 'over the cap of 20')
})

/** Reads `readBytes` of a streamed reply, then drops the connection. */
async function abandonStream (port: number, key: string, body: unknown, readBytes: number): Promise<void> {
  const req = http.request({ port, host: '127.0.0.1', method: 'POST', path: CHAT, headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' } })
  req.on('error', () => {})
  req.end(JSON.stringify(body))
  const [res] = await once(req, 'response') as [http.IncomingMessage]
  let got = 0
  for await (const chunk of res) {
    got += (chunk as Buffer).length
    if (got >= readBytes) break
  }
  req.destroy()
}

async function until (condition: () => Promise<boolean>, ms = 60_000): Promise<boolean> {
  const deadline = Date.now() + ms
  while (Date.now() < deadline) {
    if (await condition()) return true
    await new Promise(resolve => setTimeout(resolve, 20))
  }
  return false
}

t.test('usage rows: completed (JSON and stream), failed mid-stream, and a stream the client abandoned', async t => {
  // 10000 words 15 ms apart: the abandoned stream cannot have ended on its own.
  const words = Array.from({ length: 10_000 }, (_, i) => ` w${i}`)
  const slow = new ScriptedBackend({ id: 'slow', words, delayMs: 15 })
  const crashing = new ScriptedBackend({ id: 'crashing', failAfter: { deltas: 2, error: new Error('boom') } })
  const test = await buildTestApp(t, { backends: [new ScriptedBackend(), slow, crashing] })
  const { app, auth } = test

  const json = (await app.inject({ method: 'POST', url: CHAT, headers: auth, payload: chatBody() })).json()
  const streamed = await app.inject({ method: 'POST', url: CHAT, headers: auth, payload: chatBody({ stream: true, stream_options: { include_usage: true } }) })
  const streamedUsage = JSON.parse(streamed.body.split('\n\n').filter(f => f.startsWith('data: {')).at(-1)!.slice(6)).usage
  await app.inject({ method: 'POST', url: CHAT, headers: auth, payload: chatBody({ model: 'crashing', stream: true }) })

  await app.listen({ port: 0, host: '127.0.0.1' })
  const { port } = app.server.address() as AddressInfo
  await abandonStream(port, test.key, chatBody({ model: 'slow', stream: true }), 300)
  t.ok(await until(async () => (await rows(test)).length === 4), 'the abandoned stream got its row')

  const all = await rows(test)
  const prefix = test.key.slice(0, 15)
  t.match(all[0], { key_prefix: prefix, model: 'scripted', status: 'completed', prompt_tokens: json.usage.prompt_tokens, completion_tokens: json.usage.completion_tokens, error_code: null })
  t.match(all[1], { status: 'completed', prompt_tokens: streamedUsage.prompt_tokens, completion_tokens: streamedUsage.completion_tokens })
  t.match(all[2], { model: 'crashing', status: 'failed', error_code: 'internal_error' })
  t.match(all[3], { model: 'slow', status: 'cancelled', prompt_tokens: 4 })
  t.ok(all[3].completion_tokens > 0 && all[3].completion_tokens < words.length, `the abandoned stream counts what was generated (${all[3].completion_tokens})`)
  for (const row of all) {
    t.equal(row.account_id, test.account.id)
    t.ok(row.latency_ms >= 0)
    t.match(row.created_at, /^\d{4}-\d\d-\d\dT/)
  }
})

t.test('GET /api/v1/usage: tier, limits, what remains, 30 days of totals', async t => {
  const test = await buildTestApp(t, { tier: 'free', tiers: TIERS })
  const { app, auth } = test
  await app.inject({ method: 'POST', url: CHAT, headers: auth, payload: chatBody({ max_tokens: 3 }) })
  await app.inject({ method: 'POST', url: CHAT, headers: auth, payload: chatBody() })
  const res = await app.inject({ url: '/api/v1/usage', headers: auth })
  t.equal(res.statusCode, 200)
  t.equal(res.headers['x-ratelimit-remaining-requests'], '1')
  const report = res.json()
  t.match(report, {
    object: 'usage',
    account: { email: 'user@example.com', tier: 'free' },
    limits: { tier: 'free', requests_per_minute: 3, tokens_per_minute: 1000, calls_per_month: 100, max_tokens_per_request: 50, models: ['scripted'] },
    used: { requests_this_minute: 2, tokens_this_minute: 15, calls_this_month: 2 },
    remaining: { requests_this_minute: 1, tokens_this_minute: 985, calls_this_month: 98 },
    resets: { allowance: new Date(monthOf(Date.now()).endMs).toISOString() },
  })
  t.equal(report.daily.length, 30)
  t.same(report.daily.at(-1), { date: new Date().toISOString().slice(0, 10), calls: 2, prompt_tokens: 8, completion_tokens: 7, total_tokens: 15 })
  t.equal((await app.inject({ url: '/api/v1/usage' })).statusCode, 401, 'needs a key')
  const docs = (await app.inject({ url: '/docs/json' })).json()
  t.ok(docs.paths['/api/v1/usage'], 'documented in the OpenAPI document')
})

t.test('tokens_per_minute counts the tools\' definitions as prompt: an agent\'s 8,000 characters of tools do not fit a 1,000-token minute', async t => {
  /** Prompts for tools itself, as the local engine does: with tool_choice none they are left out. */
  class PromptingBackend extends ScriptedBackend {
    toolCallFormat (): ToolCallFormat { return TOOL_FORMATS.json }
  }
  const relayed = new ScriptedBackend({ id: 'relayed', words: ['ok'] })
  const prompting = new PromptingBackend({ id: 'prompting', words: ['ok'] })
  const test = await buildTestApp(t, { tier: 'tight', tiers: JSON.stringify({ default: 'tight', tiers: { tight: { tokens_per_minute: 1000 } } }), backends: [relayed, prompting] })
  const tools = Array.from({ length: 4 }, (_, i) => ({ type: 'function', function: { name: `tool_${i}`, description: 'd'.repeat(2000), parameters: { type: 'object', properties: {} } } }))
  const send = (model: string, extra: Record<string, unknown>) => test.app.inject({ method: 'POST', url: CHAT, headers: test.auth, payload: { ...chatBody({ model }), tools, ...extra } })
  for (const model of ['relayed', 'prompting']) {
    const res = await send(model, {})
    t.equal(res.statusCode, 400, `${model}: the prompt alone is about 2,100 tokens: it can never fit the minute`)
    t.match(res.json().error, { code: 'invalid_parameter', message: /The prompt alone \(about 2\d\d\d tokens\) leaves no room/ })
  }
  const relayedNone = await send('relayed', { tool_choice: 'none' })
  t.equal(relayedNone.statusCode, 400, 'tool_choice none on a backend sent the tools (an upstream): they still count')
  const promptingNone = await send('prompting', { tool_choice: 'none' })
  t.equal(promptingNone.statusCode, 200, 'tool_choice none on a backend that prompts for tools: they are not in the prompt')
  t.equal(relayed.lastRequest, undefined, 'the upstream-like backend was never sent them')
})

t.test('tokens_per_minute without max_tokens or a cap: a 466-token reply is cut to what the minute allows', async t => {
  const words = Array.from({ length: 466 }, (_, i) => `w${i}`)
  const test = await buildTestApp(t, { tier: 'tight', tiers: JSON.stringify({ default: 'tight', tiers: { tight: { tokens_per_minute: 50 } } }), backends: [new ScriptedBackend({ words })] })
  const res = await test.app.inject({ method: 'POST', url: CHAT, headers: test.auth, payload: chatBody() })
  t.equal(res.statusCode, 200)
  const body = res.json()
  t.equal(body.choices[0].finish_reason, 'length')
  t.ok(body.usage.total_tokens <= 50, `the reply stayed within the minute's 50 tokens (${body.usage.total_tokens})`)
  const again = await test.app.inject({ method: 'POST', url: CHAT, headers: test.auth, payload: chatBody() })
  t.equal(again.statusCode, 429, 'the minute is used up')
  t.match(again.json().error, { code: 'rate_limit_exceeded', message: /room for a reply of up to \d+ tokens, as it sets no max_tokens/ })
})

t.test('an agent\'s next turn: prompt tokens from the account\'s own cache count at the tier\'s weight, in the reservation and the minute', async t => {
  const { ScriptBackend, usage } = await import('../helpers/responses-app.ts')
  const turn = (prompt: number, cached: number) => [{ type: 'delta' as const, content: 'ok' }, { type: 'finish' as const, reason: 'stop' as const, usage: usage(prompt, 50, { cached }) }]
  const backend = new ScriptBackend([turn(10_010, 0), turn(10_030, 10_000)])
  const test = await buildTestApp(t, { tier: 'agents', tiers: JSON.stringify({ default: 'agents', tiers: { agents: { tokens_per_minute: 20_000 } } }), backends: [backend] })
  // 40,000 characters of instructions: about 10,000 tokens, half the minute.
  const conversation = [{ role: 'system', content: 'Be brief. '.repeat(4000) }, { role: 'user', content: 'List the files.' }]
  const first = await test.app.inject({ method: 'POST', url: CHAT, headers: test.auth, payload: { model: 'scripted', max_tokens: 100, messages: conversation } })
  t.equal(first.statusCode, 200, first.body)
  const minute = async () => (await test.app.inject({ url: '/api/v1/usage', headers: test.auth })).json().used.tokens_this_minute as number
  t.equal(await minute(), 10_060, 'nothing cached: every token counts')
  // The next turn resends it all: without counting its cached start at a tenth it would reserve
  // another 10,000 and not fit the minute.
  const second = await test.app.inject({ method: 'POST', url: CHAT, headers: test.auth, payload: { model: 'scripted', max_tokens: 100, messages: [...conversation, { role: 'assistant', content: 'ok' }, { role: 'user', content: 'And the tests?' }] } })
  t.equal(second.statusCode, 200, second.body)
  t.equal(await minute(), 10_060 + 10_080 - 9_000, '10,000 cached prompt tokens counted at 0.1')
  const rows = await test.db.selectFrom('usage_records').select(['prompt_tokens']).orderBy('id').execute()
  t.same(rows.map(r => r.prompt_tokens), [10_010, 10_030], 'the usage rows keep the real prompt tokens')
})

t.test('settings: USAGE_RECORDS_RETENTION_DAYS is read and checked; records are kept for ever unless it is set', async t => {
  t.equal(loadConfig({}).usageRetentionDays, 0)
  t.equal(loadConfig({ USAGE_RECORDS_RETENTION_DAYS: '90' }).usageRetentionDays, 90)
  t.throws(() => loadConfig({ USAGE_RECORDS_RETENTION_DAYS: '-1' }), /USAGE_RECORDS_RETENTION_DAYS/)
  t.throws(() => loadConfig({ USAGE_RECORDS_RETENTION_DAYS: 'a year' }), /USAGE_RECORDS_RETENTION_DAYS: must be a whole number/)
})
