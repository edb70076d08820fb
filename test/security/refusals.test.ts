// Refused requests are metered (src/api/refusals.ts): a key or a client
// address that keeps sending requests the API refuses (bad JSON, unknown
// model, failed validation, wrong key) gets 429 with Retry-After before its
// body is read or its key looked up; well-formed requests never count, and
// refusals never reach the tier's counters. Counts only, nothing is timed.

import net from 'node:net'
import t from 'tap'
import { buildTestApp, chatBody } from '../helpers/app.ts'
import { twoReplicasOnRedis } from '../helpers/replicas.ts'

const URL = '/api/v1/chat/completions'
const METERED = { REFUSED_PER_KEY_PER_MINUTE: '5', REFUSED_PER_ADDRESS_PER_MINUTE: '8' }
/** The probe's body, smaller: deep arrays and a model nobody serves. */
const HOSTILE = `{"model":"nope","messages":${'['.repeat(5000)}${']'.repeat(5000)}}`

t.test('a key that keeps sending refused requests gets 429 before its body is read; other keys and the tier are untouched', async t => {
  const { app, key, account, accounts, limiter } = await buildTestApp(t, { env: METERED, tier: 'free' })
  const post = (authKey: string, payload: string, remoteAddress = '10.0.0.1') =>
    app.inject({ method: 'POST', url: URL, headers: { authorization: `Bearer ${authKey}`, 'content-type': 'application/json' }, payload, remoteAddress })

  const statuses = []
  for (let i = 0; i < 5; i++) statuses.push((await post(key, HOSTILE)).statusCode)
  t.same(statuses, [400, 400, 400, 400, 400], 'five refusals (too deep), each answered')
  for (const payload of [HOSTILE, '{not json', JSON.stringify(chatBody())]) {
    const res = await post(key, payload)
    t.equal(res.statusCode, 429, 'the sixth, whatever its body, is refused before it is parsed')
    t.same(Object.keys(res.json().error), ['message', 'type', 'param', 'code'])
    t.match(res.json().error, { type: 'rate_limit_error', code: 'rate_limit_exceeded', message: /refused requests from this API key.*REFUSED_PER_KEY_PER_MINUTE/ })
    t.match(res.headers['retry-after'], /^[1-9][0-9]*$/, 'with Retry-After in seconds')
  }

  // Over a real connection: the 429 goes out before the body has arrived, and the
  // connection is closed rather than kept open for the rest of a body nobody reads.
  await app.listen({ port: 0, host: '127.0.0.1' })
  const raw = await new Promise<string>(resolve => {
    let data = ''
    const socket = net.connect((app.server.address() as net.AddressInfo).port, '127.0.0.1', () => {
      socket.write(`POST ${URL} HTTP/1.1\r\nHost: chatd\r\nAuthorization: Bearer ${key}\r\nContent-Type: application/json\r\nContent-Length: 1000000\r\n\r\n${HOSTILE.slice(0, 1000)}`)
    })
    socket.setEncoding('utf8')
    socket.on('data', chunk => { data += chunk })
    socket.on('error', () => {})
    socket.on('close', () => resolve(data))
  })
  t.match(raw, /^HTTP\/1\.1 429 /, 'a 429 before the body is complete')
  t.match(raw.split('\r\n\r\n')[0], /\r\nconnection: close(\r\n|$)/i, 'and the connection is closed')
  t.notMatch(raw, /HTTP\/1\.1 408/, 'at once, not after REQUEST_TIMEOUT_MS')

  // The tier counted none of this: the account's minute is untouched.
  t.equal((await limiter.headersFor(account))['x-ratelimit-remaining-requests'], '10', 'free tier: 10 a minute, all left')
  // Another key of the same account, and another account, are not limited by this key's refusals.
  const { key: second } = await accounts.createKey(account.id, { name: 'second' })
  t.equal((await post(second, JSON.stringify(chatBody({ model: 'scripted' })), '10.0.0.2')).statusCode, 200)
  const other = await accounts.create({ email: 'other@example.com', tier: 'unlimited' })
  const { key: otherKey } = await accounts.createKey(other.id)
  t.equal((await post(otherKey, JSON.stringify(chatBody()), '10.0.0.1')).statusCode, 200, 'same address, under its own limit: served')
})

t.test('well-formed requests never count', async t => {
  const { app, key } = await buildTestApp(t, { env: METERED })
  const statuses = new Set()
  for (let i = 0; i < 20; i++) {
    statuses.add((await app.inject({ method: 'POST', url: URL, headers: { authorization: `Bearer ${key}` }, payload: chatBody() })).statusCode)
    statuses.add((await app.inject({ method: 'GET', url: '/api/v1/models', headers: { authorization: `Bearer ${key}` } })).statusCode)
  }
  t.same([...statuses], [200])
})

t.test('an address that keeps failing authentication gets 429 before any key is looked up', async t => {
  const { app, key, accounts } = await buildTestApp(t, { env: METERED })
  const get = (authorization: string | undefined, remoteAddress: string) =>
    app.inject({ method: 'GET', url: '/api/v1/models', headers: authorization ? { authorization } : {}, remoteAddress })
  let lookups = 0
  const authenticate = accounts.authenticate.bind(accounts)
  accounts.authenticate = async token => { lookups++; return authenticate(token) }

  const statuses = []
  for (let i = 0; i < 8; i++) statuses.push((await get(i % 2 ? undefined : `Bearer sk-chatd-${String(i).padStart(32, 'x')}`, '10.0.0.3')).statusCode)
  t.same(statuses, [401, 401, 401, 401, 401, 401, 401, 401])
  const before = lookups
  const refused = await get(`Bearer ${key}`, '10.0.0.3')
  t.equal(refused.statusCode, 429, 'even a valid key, from that address')
  t.match(refused.json().error, { code: 'rate_limit_exceeded', message: /client address.*REFUSED_PER_ADDRESS_PER_MINUTE/ })
  t.equal(lookups, before, 'the key was not looked up')
  t.equal((await get(`Bearer ${key}`, '10.0.0.4')).statusCode, 200, 'from another address it works')
})

t.test('nobody can use up another key\'s refusals by sending garbage under its prefix', async t => {
  const { app, key } = await buildTestApp(t, { env: { REFUSED_PER_KEY_PER_MINUTE: '2', REFUSED_PER_ADDRESS_PER_MINUTE: '0' } })
  const forged = key.slice(0, 15) + 'z'.repeat(26)
  for (let i = 0; i < 6; i++) {
    const res = await app.inject({ method: 'POST', url: URL, headers: { authorization: `Bearer ${forged}` }, payload: { model: 'nope' } })
    t.equal(res.statusCode, 401, 'the forged key is refused as unknown, and never counted against the real one')
  }
  t.equal((await app.inject({ method: 'POST', url: URL, headers: { authorization: `Bearer ${key}` }, payload: chatBody() })).statusCode, 200)
})

t.test('REFUSED_PER_*=0 turns the meters off', async t => {
  const { app, key } = await buildTestApp(t, { env: { REFUSED_PER_KEY_PER_MINUTE: '0', REFUSED_PER_ADDRESS_PER_MINUTE: '0' } })
  const statuses = new Set()
  for (let i = 0; i < 40; i++) statuses.add((await app.inject({ method: 'POST', url: URL, headers: { authorization: `Bearer ${key}` }, payload: { model: 'nope' } })).statusCode)
  t.same([...statuses], [400])
})

t.test('with REDIS_URL, replicas share one count of refusals', async t => {
  const replicas = await twoReplicasOnRedis(t, { env: METERED, tier: 'unlimited' })
  if (!replicas) return
  const { apps, redis, key } = replicas

  const send = (app: typeof apps[number]) => app.inject({ method: 'POST', url: URL, headers: { authorization: `Bearer ${key}` }, payload: { model: 'nope', messages: [] } })

  const statuses = []
  for (let i = 0; i < 5; i++) statuses.push((await send(apps[i % 2])).statusCode)
  t.same(statuses, [400, 400, 400, 400, 400], 'five refusals across both apps')
  // Each app counts a refusal before answering it, so all five are in Redis now.
  const keys = await redis.redis.keys(`${redis.prefix}meter:*refused:key:*`)
  t.equal(keys.length, 1)
  t.equal(await redis.redis.get(keys[0]), '5', 'one count in Redis, under REDIS_PREFIX')
  t.same([(await send(apps[0])).statusCode, (await send(apps[1])).statusCode], [429, 429], 'then 429 on either app')
})
