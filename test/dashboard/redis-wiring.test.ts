// REDIS_URL as the server wires it: buildApp opens the Redis limit store, and
// two apps (two replicas) on one Redis share both the API limits and the
// dashboard's log-in throttle.

import t from 'tap'
import { chatBody } from '../helpers/app.ts'
import { twoReplicasOnRedis } from '../helpers/replicas.ts'
import { Browser, csrfToken } from './jar.ts'

t.test('two apps on one Redis: one requests-per-minute count, one log-in throttle', async t => {
  const replicas = await twoReplicasOnRedis(t, { tiers: JSON.stringify({ tiers: { free: { requests_per_minute: 3 } } }), env: { LOGIN_ATTEMPTS_PER_MINUTE: '2' } })
  if (!replicas) return
  const { apps, redis, account, key } = replicas

  const statuses = []
  for (let i = 0; i < 6; i++) {
    statuses.push((await apps[i % 2].inject({ method: 'POST', url: '/api/v1/chat/completions', headers: { authorization: `Bearer ${key}` }, payload: chatBody() })).statusCode)
  }
  t.same(statuses, [200, 200, 200, 429, 429, 429], '3 per minute across both apps')
  const stored = await redis.redis.keys(`${redis.prefix}*`)
  t.ok(stored.some(k => k === `${redis.prefix}{a:${account.id}}:win`), 'the window lives in Redis under REDIS_PREFIX')

  const logins = []
  for (let i = 0; i < 4; i++) {
    const browser = new Browser(apps[i % 2])
    const token = csrfToken((await browser.get('/api/login')).body)
    logins.push((await browser.post('/api/login', { email: 'a@example.com', password: `guess ${i}`, _csrf: token })).statusCode)
  }
  t.same(logins, [401, 401, 429, 429], 'log-in attempts are counted once across both apps')
  t.ok((await redis.redis.keys(`${redis.prefix}login:*`)).length > 0, 'in Redis')
})
