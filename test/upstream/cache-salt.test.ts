// An upstream that keeps one prefix cache for all of chatd's accounts would
// count one account's prompts in another's cached_tokens. Its cached_tokens are
// relayed only with `passCacheSalt` (vLLM), which sends each request's cache
// scope (its account and cache_salt) as `cache_salt`, so the upstream splits
// its cache as chatd's own engine does.
import t, { type Test } from 'tap'
import { cacheScope } from '../../src/api/pipeline/cache-scope.ts'
import { UpstreamBackend } from '../../src/engine/upstream/backend.ts'
import { buildTestApp } from '../helpers/app.ts'
import { chunk, loopbackServer, sseData, sseHead } from './loopback.ts'

async function setup (t: Test, passCacheSalt?: boolean) {
  const upstream = await loopbackServer(t, (_req, res) => {
    sseHead(res)
    sseData(res, chunk({ role: 'assistant', content: 'Hi' }))
    sseData(res, chunk({}, 'stop'))
    sseData(res, { id: 'u', object: 'chat.completion.chunk', created: 1, model: 'm', choices: [], usage: { prompt_tokens: 9, completion_tokens: 1, total_tokens: 10, prompt_tokens_details: { cached_tokens: 7 } } })
    sseData(res, '[DONE]')
    res.end()
  })
  const backend = new UpstreamBackend({ id: 'relay', baseUrl: `${upstream.url}/v1`, upstreamModel: 'm', ...(passCacheSalt !== undefined ? { passCacheSalt } : {}) })
  t.teardown(() => backend.close())
  const app = await buildTestApp(t, { backends: [backend] })
  const ask = async (extra: Record<string, unknown> = {}) => {
    const res = await app.app.inject({ method: 'POST', url: '/api/v1/chat/completions', headers: app.auth, payload: { model: 'relay', messages: [{ role: 'user', content: 'Hello' }], ...extra } })
    t.equal(res.statusCode, 200)
    return { usage: res.json().usage, sent: JSON.parse(upstream.requests.at(-1)!.body) as Record<string, unknown> }
  }
  return { ask, account: app.account }
}

t.test('by default: no cache_salt upstream, and the upstream\'s cached_tokens are not relayed', async t => {
  const { ask } = await setup(t)
  const { usage, sent } = await ask({ cache_salt: 'tenant-1' })
  t.notOk('cache_salt' in sent, 'nothing sent')
  t.same(usage, { prompt_tokens: 9, completion_tokens: 1, total_tokens: 10 }, 'the upstream\'s counts, without its cached_tokens')
})

t.test('passCacheSalt: each request\'s cache scope goes upstream as cache_salt, and cached_tokens come back', async t => {
  const { ask, account } = await setup(t, true)
  const plain = await ask()
  t.equal(plain.sent.cache_salt, cacheScope(account.id), 'the account\'s scope')
  t.equal(plain.usage.prompt_tokens_details.cached_tokens, 7)
  const salted = await ask({ cache_salt: 'tenant-1' })
  t.equal(salted.sent.cache_salt, cacheScope(account.id, 'tenant-1'), 'the account and the client\'s salt')
  t.not(salted.sent.cache_salt, plain.sent.cache_salt)
  t.notMatch(String(salted.sent.cache_salt), 'tenant-1', 'the client\'s salt itself does not leave chatd')
})
