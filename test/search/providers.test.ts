// Web search: each provider against a loopback server speaking that
// provider's JSON; through the endpoint, the prompt holds the numbered sources
// and the response lists them; provider errors and timeouts map to 502
// search_failed without leaking keys or addresses; results are cached per query.

import http from 'node:http'
import t, { type Test } from 'tap'
import { ConfigError, loadConfig } from '../../src/config.ts'
import { BraveProvider } from '../../src/search/brave.ts'
import { GoogleProvider } from '../../src/search/google.ts'
import { SearchProviderError, type SearchProvider, type SearchResult } from '../../src/search/provider.ts'
import { MAX_QUERY_CHARS, searchQuery } from '../../src/search/query.ts'
import { SearxngProvider } from '../../src/search/searxng.ts'
import { WebSearch } from '../../src/search/web-search.ts'
import { buildTestApp } from '../helpers/app.ts'
import { ScriptedBackend } from '../helpers/scripted-backend.ts'
import { loopbackServer, type Loopback } from '../upstream/loopback.ts'

const GOOGLE_KEY = 'AIzaSecretGoogleKey123'
const BRAVE_KEY = 'BSAsecretBraveToken456'
const never = new AbortController().signal

function json (res: http.ServerResponse, body: unknown, status = 200): void {
  res.writeHead(status, { 'content-type': 'application/json' })
  res.end(JSON.stringify(body))
}

const SEARXNG_REPLY = {
  query: 'q',
  results: [
    { title: 'Otters &amp; rivers', url: 'https://example.org/otters', content: 'Otters <b>live</b> in rivers.', engine: 'x' },
    { title: 'No URL', content: 'dropped' },
    { title: 'Sea otters', url: 'https://example.org/sea', content: 'They float.' },
    { title: 'Third', url: 'https://example.org/3', content: 'three' },
  ],
}
const GOOGLE_REPLY = {
  kind: 'customsearch#search',
  items: [
    { title: 'Otters', link: 'https://example.org/otters', snippet: 'Otters live in rivers.', displayLink: 'example.org' },
    { title: 'Sea otters', link: 'https://example.org/sea', snippet: 'They float.' },
  ],
}
const BRAVE_REPLY = {
  type: 'search',
  web: {
    type: 'search',
    results: [
      { title: 'Otters', url: 'https://example.org/otters', description: 'Otters <strong>live</strong> in rivers.' },
      { title: 'Sea otters', url: 'https://example.org/sea', description: 'They float.' },
    ]
  },
}
const EXPECTED: SearchResult[] = [
  { title: 'Otters', url: 'https://example.org/otters', snippet: 'Otters live in rivers.' },
  { title: 'Sea otters', url: 'https://example.org/sea', snippet: 'They float.' },
]

t.test('searxng: GET /search?q=&format=json, results list', async t => {
  const server = await loopbackServer(t, (_req, res) => json(res, SEARXNG_REPLY))
  const provider = new SearxngProvider(`${server.url}/searx/`)
  const results = await provider.search('where do otters live', 2, never)
  t.same(results, [{ ...EXPECTED[0], title: 'Otters & rivers' }, EXPECTED[1]], 'HTML stripped, entries without a URL dropped, count kept')
  const url = new URL(server.requests[0].path, server.url)
  t.equal(url.pathname, '/searx/search')
  t.equal(url.searchParams.get('q'), 'where do otters live')
  t.equal(url.searchParams.get('format'), 'json')
})

t.test('google: Custom Search JSON API with key, cx and num; no items means no results', async t => {
  let reply: unknown = GOOGLE_REPLY
  const server = await loopbackServer(t, (_req, res) => json(res, reply))
  const provider = new GoogleProvider({ key: GOOGLE_KEY, engineId: 'engine-1', endpoint: `${server.url}/customsearch/v1` })
  t.same(await provider.search('otters', 20, never), EXPECTED)
  const url = new URL(server.requests[0].path, server.url)
  t.equal(url.pathname, '/customsearch/v1')
  t.same(Object.fromEntries(url.searchParams), { key: GOOGLE_KEY, cx: 'engine-1', q: 'otters', num: '10' }, 'num is capped at the API\'s 10')
  reply = { kind: 'customsearch#search', searchInformation: { totalResults: '0' } }
  t.same(await provider.search('nothing at all', 5, never), [])
})

t.test('brave: web search with X-Subscription-Token and count; no web section means no results', async t => {
  let reply: unknown = BRAVE_REPLY
  const server = await loopbackServer(t, (_req, res) => json(res, reply))
  const provider = new BraveProvider({ key: BRAVE_KEY, endpoint: `${server.url}/res/v1/web/search` })
  t.same(await provider.search('otters', 1, never), [EXPECTED[0]])
  const request = server.requests[0]
  t.equal(request.headers['x-subscription-token'], BRAVE_KEY)
  t.equal(request.headers.accept, 'application/json')
  const url = new URL(request.path, server.url)
  t.same(Object.fromEntries(url.searchParams), { q: 'otters', count: '1' })
  reply = { type: 'search', query: { original: 'x' } }
  t.same(await provider.search('nothing', 5, never), [])
})

t.test('provider failures are SearchProviderErrors that name no key or address', async t => {
  let answer: (res: http.ServerResponse) => void = res => json(res, { error: { message: `bad key ${GOOGLE_KEY}` } }, 403)
  const server = await loopbackServer(t, (_req, res) => answer(res))
  const port = new URL(server.url).port
  const providers: SearchProvider[] = [
    new SearxngProvider(server.url),
    new GoogleProvider({ key: GOOGLE_KEY, engineId: 'e', endpoint: server.url }),
    new BraveProvider({ key: BRAVE_KEY, endpoint: server.url }),
  ]
  const cases: Array<[string, (res: http.ServerResponse) => void, RegExp]> = [
    ['HTTP 403', res => json(res, { error: { message: `bad key ${GOOGLE_KEY}` } }, 403), /answered HTTP 403/],
    ['not JSON', res => { res.writeHead(200, { 'content-type': 'text/html' }); res.end('<html>') }, /not JSON/],
    ['the wrong JSON', res => json(res, { results: 'x', items: 'x', web: 'x' }), /JSON/],
    ['cut off', res => { res.writeHead(200, { 'content-type': 'application/json' }); res.write('{"results": ['); setTimeout(() => res.socket?.destroy(), 10) }, /broke off|not JSON/],
  ]
  for (const [name, reply, message] of cases) {
    answer = reply
    for (const provider of providers) {
      const err = await provider.search('q', 5, never).then(() => undefined, (e: unknown) => e)
      t.type(err, SearchProviderError, `${provider.name}: ${name}`)
      t.match((err as Error).message, message, `${provider.name}: ${name}`)
      t.notMatch((err as Error).message, GOOGLE_KEY)
      t.notMatch((err as Error).message, port)
    }
  }
  t.ok(await server.settled(), 'no request left open')
})

t.test('the query is the last user message, whitespace collapsed, cut at a word', async t => {
  t.equal(searchQuery([{ role: 'user', content: 'first' }, { role: 'assistant', content: 'x' }, { role: 'user', content: '  where   do\notters live? ' }, { role: 'assistant', content: 'y' }]), 'where do otters live?')
  const long = searchQuery([{ role: 'user', content: 'otter '.repeat(100) }])
  t.ok(long.length <= MAX_QUERY_CHARS && long.endsWith('otter'), 'long messages are cut at a word boundary')
  t.throws(() => searchQuery([{ role: 'system', content: 'x' }, { role: 'user', content: '   ' }]), { code: 'invalid_parameter', param: 'messages' })
})

t.test('cache: a query is searched once while fresh, again after the TTL, and never shared between accounts', async t => {
  const server = await loopbackServer(t, (_req, res) => json(res, SEARXNG_REPLY))
  const search = new WebSearch(new SearxngProvider(server.url), { results: 2, timeoutMs: 2000, cacheTtlMs: 150 })
  const first = await search.search('Otters', never, 'A')
  t.same(await search.search('otters', never, 'A'), first, 'the same query, any case')
  t.equal(server.requests.length, 1, 'answered from the cache')
  await search.search('otters', never, 'B')
  t.equal(server.requests.length, 2, 'another account\'s same query is searched: the cache is not an oracle of what others searched')
  await search.search('beavers', never, 'A')
  t.equal(server.requests.length, 3, 'another query is searched')
  await new Promise(resolve => setTimeout(resolve, 200))
  await search.search('otters', never, 'A')
  t.equal(server.requests.length, 4, 'searched again once stale')

  const uncached = new WebSearch(new SearxngProvider(server.url), { results: 2, timeoutMs: 2000, cacheTtlMs: 0 })
  await uncached.search('otters', never, 'A')
  await uncached.search('otters', never, 'A')
  t.equal(server.requests.length, 6, 'a TTL of 0 turns the cache off')
})

/** An app whose search provider is `provider`, served by a loopback server answering with `reply`. */
async function appWithSearch (t: Test, env: (server: Loopback) => Record<string, string>, reply: (res: http.ServerResponse) => void | Promise<void>) {
  const server = await loopbackServer(t, (_req, res) => reply(res))
  const backend = new ScriptedBackend({ words: ['Otters', ' live', ' in', ' rivers', ' [1].'] })
  const test = await buildTestApp(t, { backends: [backend], env: env(server) })
  const ask = (patch: Record<string, unknown> = {}) => test.app.inject({
    method: 'POST',
    url: '/api/v1/chat/completions',
    headers: test.auth,
    payload: { model: 'scripted', messages: [{ role: 'system', content: 'Be brief.' }, { role: 'user', content: 'Where do otters live?' }], googleSearchStatus: true, ...patch },
  })
  return { server, backend, ask, test }
}

const PROVIDER_ENV: Record<string, (server: Loopback) => Record<string, string>> = {
  searxng: s => ({ SEARCH_PROVIDER: 'searxng', SEARXNG_URL: s.url }),
  google: s => ({ SEARCH_PROVIDER: 'google', GOOGLE_CSE_KEY: GOOGLE_KEY, GOOGLE_CSE_ID: 'engine-1', GOOGLE_CSE_URL: `${s.url}/customsearch/v1` }),
  brave: s => ({ SEARCH_PROVIDER: 'brave', BRAVE_API_KEY: BRAVE_KEY, BRAVE_SEARCH_URL: `${s.url}/res/v1/web/search` }),
}
const PROVIDER_REPLY: Record<string, unknown> = { searxng: { results: SEARXNG_REPLY.results.slice(2, 3).concat([{ title: 'Otters', url: 'https://example.org/otters', content: 'Otters live in rivers.', engine: 'x' }]) }, google: GOOGLE_REPLY, brave: BRAVE_REPLY }

const SOURCES_TEXT = (first: SearchResult, second: SearchResult) => 'Be brief.\n\n' +
  'Web search results for "Where do otters live?", numbered. Use them where they help, and cite each one you use by its number, like [1].\n\n' +
  `[1] ${first.title}\n${first.url}\n${first.snippet}\n\n` +
  `[2] ${second.title}\n${second.url}\n${second.snippet}`

for (const name of ['searxng', 'google', 'brave']) {
  t.test(`${name} through the endpoint: numbered sources in the prompt, search_results in the response`, async t => {
    const { server, backend, ask } = await appWithSearch(t, PROVIDER_ENV[name], res => json(res, PROVIDER_REPLY[name]))
    const results = name === 'searxng' ? [EXPECTED[1], EXPECTED[0]] : EXPECTED
    const res = await ask({ language: 'fr' })
    t.equal(res.statusCode, 200, res.body)
    t.same(backend.lastRequest?.messages, [
      { role: 'system', content: `${SOURCES_TEXT(results[0], results[1]).replace('Be brief.\n\n', 'Be brief.\n\nAnswer in French.\n\n')}` },
      { role: 'user', content: 'Where do otters live?' },
    ], 'the instruction, then the numbered sources, after the client\'s system text')
    t.same(res.json().search_results, results.map((r, i) => ({ index: i + 1, ...r })))
    t.equal(res.json().choices[0].message.content, 'Otters live in rivers [1].')
    t.equal(new URL(server.requests[0].path, server.url).searchParams.get('q'), 'Where do otters live?')

    // Streamed: the sources ride on the first (role) chunk; the other chunks are as ever.
    const stream = await ask({ stream: true, messages: [{ role: 'user', content: 'Where do otters live?' }] })
    const chunks = stream.body.split('\n\n').filter(f => f.startsWith('data: {')).map(f => JSON.parse(f.slice(6)))
    t.same(chunks[0].search_results, results.map((r, i) => ({ index: i + 1, ...r })))
    t.same(chunks[0].choices[0].delta, { role: 'assistant', content: '' })
    for (const c of chunks.slice(1)) t.notOk('search_results' in c)
    t.equal(server.requests.length, 1, 'the second request was answered from the cache')
  })
}

t.test('errors through the endpoint: 502 search_failed, no key or address; the model is not called', async t => {
  let answer: (res: http.ServerResponse) => void | Promise<void> = res => json(res, { error: `key ${GOOGLE_KEY}` }, 500)
  const { server, backend, ask } = await appWithSearch(t, s => ({ ...PROVIDER_ENV.google(s), SEARCH_TIMEOUT_MS: '300', SEARCH_CACHE_TTL_MS: '0' }), res => answer(res))
  const port = new URL(server.url).port
  const check = async (name: string, message: RegExp) => {
    const res = await ask()
    t.equal(res.statusCode, 502, name)
    t.same(Object.keys(res.json().error), ['message', 'type', 'param', 'code'])
    t.equal(res.json().error.code, 'search_failed', name)
    t.equal(res.json().error.type, 'server_error')
    t.match(res.json().error.message, message, name)
    t.notMatch(res.body, GOOGLE_KEY)
    t.notMatch(res.body, port)
    t.equal(backend.lastRequest, undefined, 'the model was not asked')
  }
  await check('HTTP 500', /^Web search failed: google answered HTTP 500\.$/)
  answer = res => json(res, { items: 'wrong' })
  await check('wrong JSON', /google sent JSON that is not a search reply/)
  // A provider that answers only when chatd gives up on it (or, were the timeout lost, after 30 s,
  // which fails the check with a 200).
  let gaveUp!: (finished: boolean) => void
  const abandoned = new Promise<boolean>(resolve => { gaveUp = resolve })
  answer = res => {
    const late = setTimeout(() => json(res, GOOGLE_REPLY), 30_000)
    res.once('close', () => {
      clearTimeout(late)
      gaveUp(res.writableFinished)
    })
  }
  await check('timeout', /^Web search failed: google did not answer within 300 ms\.$/)
  t.equal(await abandoned, false, 'the provider saw chatd close its request before any answer: the timeout fired')
  t.ok(await server.settled(), 'the timed-out provider request was abandoned, not left open')
})

t.test('no provider configured: 400 search_unavailable', async t => {
  const { app, auth } = await buildTestApp(t)
  const res = await app.inject({ method: 'POST', url: '/api/v1/chat/completions', headers: auth, payload: { model: 'scripted', messages: [{ role: 'user', content: 'x' }], googleSearchStatus: true } })
  t.equal(res.statusCode, 400)
  t.match(res.json().error, { code: 'search_unavailable', param: 'googleSearchStatus' })
})

t.test('configuration: each provider\'s settings are required, keys never echoed', async t => {
  t.equal(loadConfig({}).search, undefined)
  t.equal(loadConfig({ SEARCH_PROVIDER: '' }).search, undefined)
  t.throws(() => loadConfig({ SEARCH_PROVIDER: 'searxng' }), new ConfigError('Invalid configuration:\n  SEARXNG_URL: required when SEARCH_PROVIDER=searxng'))
  t.throws(() => loadConfig({ SEARCH_PROVIDER: 'google', GOOGLE_CSE_KEY: GOOGLE_KEY }), { message: /GOOGLE_CSE_ID: required when SEARCH_PROVIDER=google/ })
  t.throws(() => loadConfig({ SEARCH_PROVIDER: 'brave' }), { message: /BRAVE_API_KEY: required/ })
  t.throws(() => loadConfig({ SEARCH_PROVIDER: 'bing' }), { message: /SEARCH_PROVIDER/ })
  const bad = (() => { try { loadConfig({ SEARCH_PROVIDER: 'google', GOOGLE_CSE_KEY: GOOGLE_KEY, GOOGLE_CSE_ID: 'e', SEARCH_RESULTS: '50' }) } catch (err) { return (err as Error).message } })()
  t.match(bad, /SEARCH_RESULTS/)
  t.notMatch(bad, GOOGLE_KEY)
  t.same(loadConfig({ SEARCH_PROVIDER: 'brave', BRAVE_API_KEY: BRAVE_KEY }).search, { provider: 'brave', key: BRAVE_KEY, endpoint: undefined, results: 5, timeoutMs: 8000, cacheTtlMs: 300000 })
  t.same(loadConfig({}).upstream, { connectTimeoutMs: 10000, firstByteTimeoutMs: 60000, idleTimeoutMs: 60000, retries: 2 })
})
