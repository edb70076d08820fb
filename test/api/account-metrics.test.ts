// Per-account figures (METRICS_ACCOUNTS_TOP, src/api/metrics/accounts.ts): the
// top accounts get series of their own, labelled with the account id, and
// agree with what each account's usage report says; the rest are summed under
// "other"; no key, prefix or email is ever a label; and the number of label
// values stays bounded however many accounts send requests.

import t from 'tap'
import { buildTestApp, chatBody } from '../helpers/app.ts'
import { metricSamples } from '../helpers/load/metrics-scrape.ts'
import { AccountMetrics, OTHER } from '../../src/api/metrics/accounts.ts'
import { Registry } from 'prom-client'

function sum (text: string, name: string, labels: Record<string, string>): number {
  return metricSamples(text, name).filter(s => Object.entries(labels).every(([k, v]) => s.labels[k] === v)).reduce((n, s) => n + s.value, 0)
}

t.test('the top accounts\' series agree with their usage reports; the rest is "other"', async t => {
  const test = await buildTestApp(t, { env: { METRICS_ACCOUNTS_TOP: '2' } })
  const second = await test.accounts.create({ email: 'second@example.com', tier: 'unlimited' })
  const third = await test.accounts.create({ email: 'third@example.com', tier: 'unlimited' })
  const keys = {
    first: test.key,
    second: (await test.accounts.createKey(second.id, { name: 't' })).key,
    third: (await test.accounts.createKey(third.id, { name: 't' })).key,
  }
  const chat = (key: string, extra: Record<string, unknown> = {}) => test.app.inject({ method: 'POST', url: '/api/v1/chat/completions', headers: { authorization: `Bearer ${key}` }, payload: chatBody(extra) })
  t.equal((await chat(keys.first)).statusCode, 200)
  t.equal((await chat(keys.first, { messages: [{ role: 'user', content: 'a longer prompt than the first one' }] })).statusCode, 200)
  t.equal((await chat(keys.second)).statusCode, 200)
  t.equal((await chat(keys.second, { n: 2 })).statusCode, 400, 'a refusal')
  t.equal((await chat(keys.third)).statusCode, 200, 'a third account, past the top two')

  const text = (await test.app.inject({ url: '/metrics' })).body
  for (const [name, key, id] of [['first', keys.first, test.account.id], ['second', keys.second, second.id]] as const) {
    const report = (await test.app.inject({ url: '/api/v1/usage', headers: { authorization: `Bearer ${key}` } })).json()
    const prompt = report.daily.reduce((n: number, d: { prompt_tokens: number }) => n + d.prompt_tokens, 0)
    const completion = report.daily.reduce((n: number, d: { completion_tokens: number }) => n + d.completion_tokens, 0)
    const calls = report.daily.reduce((n: number, d: { calls: number }) => n + d.calls, 0)
    const labels = { model_name: 'scripted', account: String(id) }
    t.equal(sum(text, 'chatd_account_prompt_tokens_total', labels), prompt, `${name}: prompt tokens as its usage report says`)
    t.equal(sum(text, 'chatd_account_generation_tokens_total', labels), completion, `${name}: completion tokens as its usage report says`)
    t.equal(sum(text, 'chatd_account_requests_total', labels), calls, `${name}: requests as its usage rows count them`)
  }
  t.equal(sum(text, 'chatd_account_refusals_total', { account: String(second.id), reason: 'invalid_parameter' }), 1, 'the refusal, by reason')
  t.equal(sum(text, 'chatd_account_requests_total', { account: OTHER, status: 'completed' }), 1, 'the third account is "other"')
  t.equal(sum(text, 'chatd_account_requests_total', { account: String(third.id) }), 0)
  const accounts = new Set(metricSamples(text, 'chatd_account_requests_total').map(s => s.labels.account))
  t.same([...accounts].sort(), [String(test.account.id), String(second.id), OTHER].sort())
  t.notMatch(text, /@|sk-chatd-/, 'no email and no key anywhere in /metrics')
})

t.test('every window the places go to the accounts that used the most; a flood of accounts stays bounded', async t => {
  let now = 0
  const registry = new Registry()
  const accounts = new AccountMetrics(registry, { top: 1, now: () => now, windowMs: 1000 })
  const usage = (tokens: number) => ({ prompt_tokens: tokens, completion_tokens: 0, total_tokens: tokens })
  accounts.ended(1, 'm', 'completed', usage(10))
  accounts.ended(2, 'm', 'completed', usage(100))
  let text = await registry.metrics()
  t.equal(sum(text, 'chatd_account_prompt_tokens_total', { account: '1' }), 10, 'the first account took the place')
  t.equal(sum(text, 'chatd_account_prompt_tokens_total', { account: OTHER }), 100)
  now = 1500 // the window is over: account 2 used more in it
  accounts.ended(2, 'm', 'completed', usage(1))
  accounts.ended(1, 'm', 'completed', usage(5))
  text = await registry.metrics()
  t.equal(sum(text, 'chatd_account_prompt_tokens_total', { account: '2' }), 1, 'account 2 holds the place now, counted from then')
  t.equal(sum(text, 'chatd_account_prompt_tokens_total', { account: '1' }), 0, 'account 1 lost its series')
  t.equal(sum(text, 'chatd_account_prompt_tokens_total', { account: OTHER }), 105)

  // 20000 accounts, each refused once: the label stays within top + "other", and so does the tally.
  for (let id = 10; id < 20_010; id++) accounts.refused(id, 'm', 'rate_limit_exceeded')
  now = 3000
  accounts.refused(99_999, 'm', 'rate_limit_exceeded')
  text = await registry.metrics()
  const labels = new Set(metricSamples(text, 'chatd_account_refusals_total').map(s => s.labels.account))
  t.ok(labels.size <= 2, `at most one account and "other" (${[...labels].join(', ')})`)
  t.equal(sum(text, 'chatd_account_refusals_total', {}), 20_001, 'every refusal counted')
})

t.test('METRICS_ACCOUNTS_TOP=0 (the default) has no per-account series', async t => {
  const test = await buildTestApp(t)
  t.equal((await test.app.inject({ method: 'POST', url: '/api/v1/chat/completions', headers: test.auth, payload: chatBody() })).statusCode, 200)
  t.notMatch((await test.app.inject({ url: '/metrics' })).body, /chatd_account_/)
})
