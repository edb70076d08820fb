// Work a key can cause runs only after its limits are checked (the outside
// probe of the three doors): a key past its tier's minute gets 429 before a
// stored conversation is read or a Responses or Messages body translated, and requests that
// generate nothing (count_tokens, stored-response reads) still count as one
// request of the minute each, so they cannot be sent without bound.
import t from 'tap'
import { buildTestApp } from '../helpers/app.ts'
import { buildResponsesApp, MemoryResponseStore, ScriptBackend, usage } from '../helpers/responses-app.ts'

const TIERS = JSON.stringify({
  default: 'small',
  tiers: { small: { requests_per_minute: 3, tokens_per_minute: 100000, calls_per_month: 1000, max_tokens_per_request: 2048, models: ['*'] } },
})

class CountingStore extends MemoryResponseStore {
  chains = 0
  override async chain (accountId: number, id: string): Promise<Array<Record<string, unknown>> | undefined> {
    this.chains++
    return super.chain(accountId, id)
  }
}

const answer = [{ type: 'delta' as const, content: 'Hi.' }, { type: 'finish' as const, reason: 'stop' as const, usage: usage(3, 2) }]

t.test('Responses: a key past its minute is refused before its stored conversation is read', async t => {
  const store = new CountingStore()
  const { app, accounts } = await buildResponsesApp(t, { backends: [new ScriptBackend([answer])], store })
  const account = await accounts.create({ email: 'small@example.com', tier: 'free' })
  const auth = { authorization: `Bearer ${(await accounts.createKey(account.id, { name: 'k' })).key}` }
  const first = await app.inject({ method: 'POST', url: '/api/v1/responses', headers: auth, payload: { model: 'scripted', input: 'Hello' } })
  t.equal(first.statusCode, 200, first.body)
  const id = first.json().id as string
  // The free tier allows 10 requests a minute: the first and nine continuations.
  for (let i = 0; i < 9; i++) {
    const next = await app.inject({ method: 'POST', url: '/api/v1/responses', headers: auth, payload: { model: 'scripted', input: 'More', previous_response_id: id } })
    t.equal(next.statusCode, 200, next.body)
  }
  t.equal(store.chains, 9)
  const refused = await app.inject({ method: 'POST', url: '/api/v1/responses', headers: auth, payload: { model: 'scripted', input: 'More', previous_response_id: id } })
  t.equal(refused.statusCode, 429)
  t.equal(refused.json().error.code, 'rate_limit_exceeded')
  t.ok(Number(refused.headers['retry-after']) >= 1, 'with Retry-After')
  t.equal(store.chains, 9, 'the conversation was not read for the refused request')
})

t.test('Responses: a key past its minute is refused before its input items are checked and translated', async t => {
  const { app, accounts } = await buildResponsesApp(t, { backends: [new ScriptBackend([answer, answer, answer])], tiers: TIERS })
  const account = await accounts.create({ email: 'small@example.com', tier: 'small' })
  const auth = { authorization: `Bearer ${(await accounts.createKey(account.id, { name: 'k' })).key}` }
  const send = (input: unknown) => app.inject({ method: 'POST', url: '/api/v1/responses', headers: auth, payload: { model: 'scripted', input } })
  // An image part is refused by the item checks (400), so the answer says which ran first.
  const image = [{ role: 'user', content: [{ type: 'input_image', image_url: 'https://example.com/a.png' }] }]
  t.equal((await send(image)).statusCode, 400, 'within the limit: the item checks refuse it')
  for (let i = 0; i < 3; i++) t.equal((await send('Hello')).statusCode, 200)
  const past = await send(image)
  t.equal(past.statusCode, 429, 'past the limit: refused before the items are looked at')
  t.equal(past.json().error.code, 'rate_limit_exceeded')
})

t.test('Messages: a key past its minute is refused before its body is translated', async t => {
  const { app, auth } = await buildTestApp(t, { tiers: TIERS, tier: 'small' })
  const send = (content: unknown) => app.inject({ method: 'POST', url: '/api/v1/messages', headers: auth, payload: { model: 'scripted', max_tokens: 16, messages: [{ role: 'user', content }] } })
  // An image block is refused by the translation (400), so the answer says which ran first.
  t.equal((await send([{ type: 'image', source: {} }])).statusCode, 400, 'within the limit: the translation refuses it')
  for (let i = 0; i < 3; i++) t.equal((await send('Hello')).statusCode, 200)
  const past = await send([{ type: 'image', source: {} }])
  t.equal(past.statusCode, 429, 'past the limit: refused before the translation')
  t.equal(past.json().type, 'error')
  t.equal(past.json().error.type, 'rate_limit_error')
})

t.test('count_tokens counts as one request of the minute, with no tokens and no call of the month', async t => {
  const { app, auth } = await buildTestApp(t, { tiers: TIERS, tier: 'small' })
  const count = () => app.inject({ method: 'POST', url: '/api/v1/messages/count_tokens', headers: auth, payload: { model: 'scripted', messages: [{ role: 'user', content: 'x'.repeat(40_000) }] } })
  for (let i = 0; i < 3; i++) {
    const res = await count()
    t.equal(res.statusCode, 200, res.body)
    t.equal(res.headers['x-ratelimit-remaining-requests'], String(2 - i))
    t.equal(res.headers['x-ratelimit-remaining-tokens'], '100000', 'no tokens counted')
  }
  const refused = await count()
  t.equal(refused.statusCode, 429)
  t.equal(refused.json().error.type, 'rate_limit_error')
  t.ok(Number(refused.headers['retry-after']) >= 1)
  const report = await app.inject({ url: '/api/v1/usage', headers: auth })
  t.equal(report.statusCode, 200)
  t.match(report.json(), { used: { requests_this_minute: 3, tokens_this_minute: 0, calls_this_month: 0 } }, 'three requests of the minute, no tokens, no call of the month')
})

t.test('stored-response reads count as one request of the minute each', async t => {
  const { app, auth } = await buildTestApp(t, { tiers: TIERS, tier: 'small' })
  const created = await app.inject({ method: 'POST', url: '/api/v1/responses', headers: auth, payload: { model: 'scripted', input: 'Hello' } })
  t.equal(created.statusCode, 200, created.body)
  const id = created.json().id as string
  t.equal((await app.inject({ url: `/api/v1/responses/${id}`, headers: auth })).statusCode, 200)
  const items = await app.inject({ url: `/api/v1/responses/${id}/input_items`, headers: auth })
  t.equal(items.statusCode, 200)
  t.equal(items.headers['x-ratelimit-remaining-requests'], '0')
  const refused = await app.inject({ url: `/api/v1/responses/${id}/input_items`, headers: auth })
  t.equal(refused.statusCode, 429)
  t.equal((await app.inject({ url: `/api/v1/responses/${id}`, headers: auth })).statusCode, 429)
})
