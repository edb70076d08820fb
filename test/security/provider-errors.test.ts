// Every way an upstream model server or a web search provider can fail ends
// in an error whose message (what the client reads and what is logged) holds
// neither the credential chatd sent nor the address it sent it to, even when
// the server echoes both back: upstream keys (Bearer), Brave's subscription
// token (a header), Google's key (in the query string) and credentials in a
// SearXNG or upstream URL (user:password@host). secrets.test.ts runs two of
// these through the whole server; this covers the rest, one backend or
// provider at a time.

import type http from 'node:http'
import t from 'tap'
import { ApiError } from '../../src/errors.ts'
import { UpstreamBackend } from '../../src/engine/upstream/backend.ts'
import { WebSearch, type SearchSettings } from '../../src/search/web-search.ts'
import { loopbackServer, sseData, sseHead, chunk } from '../upstream/loopback.ts'

const UPSTREAM_KEY = 'sk-upstream-KEY0123456789SECRET'
const SEARCH_KEY = 'SEARCHKEY0123456789SECRET'
const URL_PASSWORD = 'URLPASSWORD0123456789'

/** Everything the client sent, as a hostile server would echo it. */
function echo (req: http.IncomingMessage): string {
  return `${req.url} ${JSON.stringify(req.headers)}`
}

type Reply = (req: http.IncomingMessage, res: http.ServerResponse) => void

const UPSTREAM_FAILURES: Record<string, Reply> = {
  'refuses the key (401)': (req, res) => { res.writeHead(401, { 'content-type': 'application/json' }); res.end(JSON.stringify({ error: { message: echo(req) } })) },
  'fails (500)': (req, res) => { res.writeHead(500, { 'content-type': 'text/plain' }); res.end(echo(req)) },
  'rejects the request (400)': (req, res) => { res.writeHead(400, { 'content-type': 'application/json' }); res.end(JSON.stringify({ error: echo(req) })) },
  'answers in neither SSE nor JSON': (req, res) => { res.writeHead(200, { 'content-type': 'text/html' }); res.end(`<p>${echo(req)}</p>`) },
  'answers JSON that is no completion': (req, res) => { res.writeHead(200, { 'content-type': 'application/json' }); res.end(JSON.stringify({ message: echo(req) })) },
  'sends an unreadable chunk': (req, res) => { sseHead(res); sseData(res, `{"choices": ${JSON.stringify(echo(req))}`); res.end() },
  'reports an error mid-stream': (req, res) => { sseHead(res); sseData(res, chunk({ content: 'Hi' })); sseData(res, { error: { message: echo(req) } }); res.end() },
  'cuts the stream off': (req, res) => { sseHead(res); sseData(res, chunk({ content: echo(req) })); res.destroy() },
}

t.test('upstream failures never carry the upstream key or the credentials in its URL', async t => {
  let reply: Reply = () => {}
  const server = await loopbackServer(t, (req, res) => reply(req, res))
  const withCredentials = server.url.replace('http://', `http://chatd:${URL_PASSWORD}@`)
  const request = { messages: [{ role: 'user' as const, content: 'hi' }], temperature: 1, topP: 1, topK: 0, stop: [] }
  const settings = { connectTimeoutMs: 2000, firstByteTimeoutMs: 2000, idleTimeoutMs: 2000, retries: 0 }

  const generate = async (backend: UpstreamBackend): Promise<{ error?: ApiError; text: string }> => {
    let text = ''
    try {
      for await (const event of backend.generate(request, new AbortController().signal)) if (event.type === 'delta') text += event.content ?? ''
      return { text }
    } catch (err) {
      return { error: err as ApiError, text }
    }
  }
  for (const [name, failure] of Object.entries(UPSTREAM_FAILURES)) {
    reply = failure
    const backend = new UpstreamBackend({ id: 'u', baseUrl: `${withCredentials}/v1`, apiKey: UPSTREAM_KEY, upstreamModel: 'm', settings })
    const { error } = await generate(backend)
    await backend.close()
    t.ok(error instanceof ApiError, `${name}: an API error (${error?.code})`)
    const seen = JSON.stringify(error?.toBody()) + String(error?.stack)
    t.notOk(seen.includes(UPSTREAM_KEY), `${name}: no upstream key`)
    t.notOk(seen.includes(URL_PASSWORD), `${name}: no URL credentials`)
    t.notOk(seen.includes(server.url.slice(7)), `${name}: no upstream address`)
  }
  const sent = server.requests.at(-1)!
  t.equal(sent.headers.authorization, `Bearer ${UPSTREAM_KEY}`, 'the key was really sent, so each server had it to echo')

  // Nobody listening: the connection is refused.
  const closed = new UpstreamBackend({ id: 'u', baseUrl: `http://chatd:${URL_PASSWORD}@127.0.0.1:1/v1`, apiKey: UPSTREAM_KEY, upstreamModel: 'm', settings })
  const { error } = await generate(closed)
  await closed.close()
  t.match(error, { code: 'upstream_error' })
  t.notMatch(JSON.stringify(error?.toBody()), new RegExp(`${URL_PASSWORD}|${UPSTREAM_KEY}|127\\.0\\.0\\.1`), 'an unreachable upstream is not named')
})

const SEARCH_FAILURES: Record<string, Reply> = {
  'refuses (403)': (req, res) => { res.writeHead(403, { 'content-type': 'application/json' }); res.end(JSON.stringify({ error: echo(req) })) },
  'fails (500)': (req, res) => { res.writeHead(500); res.end(echo(req)) },
  'answers something that is not JSON': (req, res) => { res.writeHead(200, { 'content-type': 'text/html' }); res.end(echo(req)) },
  'answers JSON that is no search reply': (req, res) => { res.writeHead(200, { 'content-type': 'application/json' }); res.end(JSON.stringify(echo(req))) },
  'breaks off': (req, res) => { res.writeHead(200, { 'content-type': 'application/json', 'content-length': '1000' }); res.write(`{"x":${JSON.stringify(echo(req))}`); res.destroy() },
  'is too slow': () => {},
}

t.test('search failures never carry the provider\'s key or the credentials in its URL', async t => {
  let reply: Reply = () => {}
  const server = await loopbackServer(t, (req, res) => reply(req, res))
  const withCredentials = server.url.replace('http://', `http://chatd:${URL_PASSWORD}@`)
  const common = { results: 3, timeoutMs: 500, cacheTtlMs: 0 }
  const providers: Record<string, SearchSettings> = {
    google: { provider: 'google', key: SEARCH_KEY, engineId: 'cx-engine', endpoint: `${server.url}/customsearch/v1`, ...common },
    brave: { provider: 'brave', key: SEARCH_KEY, endpoint: `${server.url}/res/v1/web/search`, ...common },
    searxng: { provider: 'searxng', url: `${withCredentials}/searx`, ...common },
  }
  for (const [provider, settings] of Object.entries(providers)) {
    for (const [name, failure] of Object.entries(SEARCH_FAILURES)) {
      reply = failure
      const error = await WebSearch.fromSettings(settings).search(`query ${name}`, new AbortController().signal, 'account').then(() => undefined, (err: unknown) => err as ApiError)
      t.match(error, { code: 'search_failed' }, `${provider} ${name}: search_failed`)
      const seen = JSON.stringify(error?.toBody()) + String(error?.stack)
      t.notOk(seen.includes(SEARCH_KEY), `${provider} ${name}: no key`)
      t.notOk(seen.includes(URL_PASSWORD), `${provider} ${name}: no URL credentials`)
      t.notOk(seen.includes(server.url.slice(7)), `${provider} ${name}: no address`)
    }
  }
  const sent = server.requests.map(r => `${r.path} ${JSON.stringify(r.headers)}`).join('\n')
  t.match(sent, `key=${SEARCH_KEY}`, 'Google\'s key went in the query string')
  t.match(sent, `"x-subscription-token":"${SEARCH_KEY}"`, 'Brave\'s in a header')
  t.match(sent, '/searx/search?q=', 'and SearXNG was asked at its URL')
})
