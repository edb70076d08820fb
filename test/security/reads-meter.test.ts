// Reads that count against no tier limit (GET /usage, GET /models and
// /models/{id}, DELETE /responses/{id}) are metered per account
// (src/api/reads.ts): past READS_PER_ACCOUNT_PER_MINUTE, 429 with Retry-After
// before the handler runs, for all the account's keys together; other
// accounts, the account's completions and the tier's minute are untouched.
// Counts only, nothing is timed.

import t from 'tap'
import { StoredResponses } from '../../src/responses/stored-responses.ts'
import { buildTestApp, chatBody } from '../helpers/app.ts'
import { twoReplicasOnRedis } from '../helpers/replicas.ts'

const READS = '4'

t.test('an account past its reads gets 429 before the handler runs, on every key; others, its completions and its tier are untouched', async t => {
  const { app, db, config, accounts, account, auth, limiter } = await buildTestApp(t, { env: { READS_PER_ACCOUNT_PER_MINUTE: READS, REFUSED_PER_KEY_PER_MINUTE: '2' }, tier: 'free' })
  const { key: second } = await accounts.createKey(account.id, { name: 'second' })
  const secondAuth = { authorization: `Bearer ${second}` }
  const other = await accounts.create({ email: 'other@example.com', tier: 'free' })
  const { key: otherKey } = await accounts.createKey(other.id, { name: 'other' })
  const store = new StoredResponses(db, { limits: config.storedResponses })
  const record = { id: 'resp_kept', accountId: account.id, previousResponseId: null, model: 'scripted', createdAt: 1_700_000_000, response: { id: 'resp_kept', object: 'response', output: [] }, input: [] }
  await store.save(record)

  const reads = [
    await app.inject({ url: '/api/v1/usage', headers: auth }),
    await app.inject({ url: '/api/v1/models', headers: secondAuth }),
    await app.inject({ url: '/api/v1/models/scripted', headers: auth }),
    await app.inject({ method: 'DELETE', url: '/api/v1/responses/resp_unknown', headers: secondAuth }),
  ]
  t.same(reads.map(r => r.statusCode), [200, 200, 200, 404], 'four reads, from either key, each answered')

  for (const [method, url, headers] of [['GET', '/api/v1/usage', auth], ['GET', '/api/v1/models', secondAuth], ['GET', '/api/v1/models/scripted', auth], ['DELETE', '/api/v1/responses/resp_kept', secondAuth]] as const) {
    const res = await app.inject({ method, url, headers })
    t.equal(res.statusCode, 429, `the fifth and later (${method} ${url}): 429, whichever key`)
    t.same(Object.keys(res.json().error), ['message', 'type', 'param', 'code'])
    t.match(res.json().error, { type: 'rate_limit_error', code: 'rate_limit_exceeded', message: /reads .* by this account: 4 a minute.*READS_PER_ACCOUNT_PER_MINUTE/ })
    t.match(res.headers['retry-after'], /^[1-9][0-9]*$/, 'with Retry-After in seconds')
  }
  t.not(await store.get(account.id, 'resp_kept'), undefined, 'the refused DELETE did not run: the stored response is still there')

  const otherRead = await app.inject({ url: '/api/v1/usage', headers: { authorization: `Bearer ${otherKey}` } })
  t.equal(otherRead.statusCode, 200, 'another account reads as before')
  t.equal((await limiter.headersFor(account))['x-ratelimit-remaining-requests'], '10', 'the tier counted none of the reads: free tier, 10 a minute, all left')
  const chat = await app.inject({ method: 'POST', url: '/api/v1/chat/completions', headers: auth, payload: chatBody() })
  t.equal(chat.statusCode, 200, 'the account\'s completions are not held back by its reads')
  // The 429s are not refusals: the key's refusals meter (2 a minute) has not been reached.
  const bad = await app.inject({ method: 'POST', url: '/api/v1/chat/completions', headers: auth, payload: { model: 'nope', messages: [] } })
  t.equal(bad.statusCode, 400, 'the reads\' 429s did not count as the key\'s refusals')
})

t.test('a request that is refused before the meter (a wrong key, a bad parameter) does not use the account\'s reads', async t => {
  const { app, auth } = await buildTestApp(t, { env: { READS_PER_ACCOUNT_PER_MINUTE: '2' } })
  const forged = `${auth.authorization.slice(0, -4)}AAAA`
  for (let i = 0; i < 5; i++) t.equal((await app.inject({ url: '/api/v1/usage', headers: { authorization: forged } })).statusCode, 401)
  const statuses = []
  for (let i = 0; i < 3; i++) statuses.push((await app.inject({ url: '/api/v1/usage', headers: auth })).statusCode)
  t.same(statuses, [200, 200, 429], 'the account\'s two reads are its own')
})

t.test('READS_PER_ACCOUNT_PER_MINUTE=0 turns the meter off', async t => {
  const { app, auth } = await buildTestApp(t, { env: { READS_PER_ACCOUNT_PER_MINUTE: '0' } })
  const statuses = new Set<number>()
  for (let i = 0; i < 50; i++) statuses.add((await app.inject({ url: '/api/v1/models', headers: auth })).statusCode)
  t.same([...statuses], [200])
})

t.test('with REDIS_URL, replicas share each account\'s count', async t => {
  const replicas = await twoReplicasOnRedis(t, { env: { READS_PER_ACCOUNT_PER_MINUTE: READS }, tier: 'unlimited' })
  if (!replicas) return
  const { apps, redis, account, key } = replicas

  const statuses = []
  for (let i = 0; i < 6; i++) statuses.push((await apps[i % 2].inject({ url: '/api/v1/models', headers: { authorization: `Bearer ${key}` } })).statusCode)
  t.same(statuses, [200, 200, 200, 200, 429, 429], 'four reads across both apps, then 429 on either')
  const keys = await redis.redis.keys(`${redis.prefix}meter:*read:account:${account.id}`)
  t.equal(keys.length, 1, 'one count in Redis, under REDIS_PREFIX')
  t.equal(await redis.redis.get(keys[0]), '6')
})
