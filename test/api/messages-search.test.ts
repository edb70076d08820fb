// The Messages API's web_search server tool on a scripted backend and a loopback SearXNG: the
// model is offered a web_search function; each call is run by chatd and shown as a
// server_tool_use block and its web_search_tool_result (never as a tool_use), its results reach
// the model as the call's result and the reply goes on in the same usage row; max_uses and
// chatd's bound of three; domain filters; a failing provider told to the model; the stream adding
// up to the message; Anthropic's SDK reading the blocks; without a provider, ignored (forced: 400).
import http from 'node:http'
import type { AddressInfo } from 'node:net'
import Anthropic from '@anthropic-ai/sdk'
import t, { type Test } from 'tap'
import type { GenerateEvent } from '../../src/engine/backend.ts'
import { MAX_QUERY_CHARS } from '../../src/search/query.ts'
import { buildTestApp } from '../helpers/app.ts'
import { ScriptBackend, usage } from '../helpers/responses-app.ts'
import { accumulateMessage, sseEvents } from '../helpers/sse-events.ts'
import { loopbackServer } from '../upstream/loopback.ts'

const URL = '/api/v1/messages'
const RESULTS = {
  results: [
    { title: 'Otters', url: 'https://example.org/otters', content: 'Otters live in rivers.' },
    { title: 'Sea otters', url: 'https://docs.wildlife.net/sea/otters', content: 'Sea otters live in the sea.' },
  ],
}
const WEB_SEARCH = { type: 'web_search_20250305', name: 'web_search' }

const searchCall = (query: unknown, id = 'call_s', before?: string): GenerateEvent[] => [
  ...(before !== undefined ? [{ type: 'delta' as const, content: before }] : []),
  { type: 'delta', toolCalls: [{ index: 0, id, name: 'web_search' }] },
  { type: 'delta', toolCalls: [{ index: 0, arguments: JSON.stringify({ query }) }] },
  { type: 'finish', reason: 'tool_calls', usage: usage(20, 6) },
]
const answer: GenerateEvent[] = [
  { type: 'delta', content: 'Otters live' },
  { type: 'delta', content: ' in rivers [1].' },
  { type: 'finish', reason: 'stop', usage: usage(40, 7, { cached: 20 }) },
]

async function searchApp (t: Test, scripts: GenerateEvent[][], reply: (res: http.ServerResponse) => void = res => {
  res.writeHead(200, { 'content-type': 'application/json' })
  res.end(JSON.stringify(RESULTS))
}) {
  const provider = await loopbackServer(t, (_req, res) => reply(res))
  const backend = new ScriptBackend(scripts)
  const built = await buildTestApp(t, { backends: [backend], env: { SEARCH_PROVIDER: 'searxng', SEARXNG_URL: provider.url, SEARCH_CACHE_TTL_MS: '0' } })
  return { ...built, backend, provider }
}

const ask = (extra: Record<string, unknown> = {}) => ({ model: 'scripted', max_tokens: 256, messages: [{ role: 'user', content: 'Where do otters live?' }], tools: [WEB_SEARCH], ...extra })

/** Ids and sealed values are random: the shape without them (a result still names its server_tool_use's id, checked apart). */
const withoutIds = (m: any) => ({
  ...m,
  id: '',
  content: m.content.map((b: any) => b.type === 'server_tool_use'
    ? { ...b, id: '' }
    : b.type === 'web_search_tool_result'
      ? { ...b, tool_use_id: '', content: Array.isArray(b.content) ? b.content.map((r: any) => ({ ...r, encrypted_content: '' })) : b.content }
      : b),
})

t.test('a web_search call is run by chatd: server_tool_use and web_search_tool_result blocks, the results given to the model, one usage row', async t => {
  const { app, auth, backend, provider, db } = await searchApp(t, [searchCall('where do otters live'), answer])
  const res = await app.inject({ method: 'POST', url: URL, headers: auth, payload: ask() })
  t.equal(res.statusCode, 200, res.body)
  const message = res.json()
  t.same(message.content.map((b: { type: string }) => b.type), ['server_tool_use', 'web_search_tool_result', 'text'], 'no tool_use block for the server tool')
  t.match(message.content[0].id, /^srvtoolu_[A-Za-z0-9_-]+$/)
  t.same({ ...message.content[0], id: '' }, { type: 'server_tool_use', id: '', name: 'web_search', input: { query: 'where do otters live' } })
  t.equal(message.content[1].tool_use_id, message.content[0].id)
  t.match(message.content[1].content, [
    { type: 'web_search_result', url: 'https://example.org/otters', title: 'Otters', page_age: null, encrypted_content: /^chatd1\./ },
    { type: 'web_search_result', url: 'https://docs.wildlife.net/sea/otters', title: 'Sea otters', page_age: null, encrypted_content: /^chatd1\./ },
  ])
  t.notMatch(JSON.stringify(message.content[1]), /live in/, 'the results\' text only sealed')
  t.same(message.content[2], { type: 'text', text: 'Otters live in rivers [1].' })
  t.equal(message.stop_reason, 'end_turn', 'a search is not the client\'s tool_use')
  t.same(message.usage, { input_tokens: 40, output_tokens: 13, cache_read_input_tokens: 20, cache_creation_input_tokens: 0, server_tool_use: { web_search_requests: 1 } }, 'the rounds summed')

  t.equal(provider.requests.length, 1)
  t.match(provider.requests[0].path, /q=where(\+|%20)do(\+|%20)otters(\+|%20)live/)
  t.ok(backend.requests[0].tools?.some(tool => tool.function.name === 'web_search'), 'the model is offered a web_search function')
  t.notOk(backend.requests[0].messages.some(m => /Web search results/.test(String(m.content))), 'no search before the model asks for one')
  const round2 = backend.requests[1].messages
  t.match(round2.at(-2), { role: 'assistant', toolCalls: [{ id: 'call_s', function: { name: 'web_search' } }] })
  t.match(round2.at(-1), { role: 'tool', toolCallId: 'call_s', content: /\[1\] Otters\nhttps:\/\/example\.org\/otters\nOtters live in rivers\./ })
  t.equal(backend.requests[1].maxTokens, 250, 'the second round may use what the first left of max_tokens')
  const rows = await db.selectFrom('usage_records').selectAll().execute()
  t.equal(rows.length, 1, 'one request, one usage row')
  t.match(rows[0], { request_id: message.id, prompt_tokens: 60, completion_tokens: 13, status: 'completed' })
})

t.test('sent back on the next turn, a search is replayed to the model as it read it: the call, then its results, sealed text included', async t => {
  const { app, auth, backend } = await searchApp(t, [searchCall('where do otters live'), answer, [{ type: 'delta', content: 'The second one.' }, { type: 'finish', reason: 'stop', usage: usage(80, 4) }]])
  const first = (await app.inject({ method: 'POST', url: URL, headers: auth, payload: ask() })).json()
  const round2 = backend.requests[1].messages
  const next = ask({ messages: [{ role: 'user', content: 'Where do otters live?' }, { role: 'assistant', content: first.content }, { role: 'user', content: 'And the sea ones?' }] })
  const res = await app.inject({ method: 'POST', url: URL, headers: auth, payload: next })
  t.equal(res.statusCode, 200, res.body)
  const prompt = backend.requests[2].messages
  const searched = first.content[0].id
  t.match(prompt.slice(-4), [
    { role: 'assistant', toolCalls: [{ id: searched, function: { name: 'web_search', arguments: '{"query":"where do otters live"}' } }] },
    { role: 'tool', toolCallId: searched, content: round2.at(-1)!.content },
    { role: 'assistant', content: 'Otters live in rivers [1].' },
    { role: 'user', content: 'And the sea ones?' },
  ], 'the results read exactly as on the turn that searched')
  t.match(prompt.at(-3)!.content, /Sea otters live in the sea\./)

  // A value this server did not seal for this account (here another server's) opens to nothing: titles and links only, never an error.
  const other = await searchApp(t, [[{ type: 'delta', content: 'ok' }, { type: 'finish', reason: 'stop', usage: usage(9, 1) }]])
  const elsewhere = await other.app.inject({ method: 'POST', url: URL, headers: other.auth, payload: next })
  t.equal(elsewhere.statusCode, 200, elsewhere.body)
  const replayed = other.backend.requests[0].messages.find(m => m.role === 'tool')
  t.match(replayed?.content, /\[2\] Sea otters\nhttps:\/\/docs\.wildlife\.net\/sea\/otters/)
  t.notMatch(replayed?.content, /live in/, 'no text from a value this server did not seal for this account')
})

t.test('a search that was not run, or a result that answers no search of its turn, replays as such or not at all', async t => {
  const { app, auth, backend } = await searchApp(t, [[{ type: 'delta', content: 'ok' }, { type: 'finish', reason: 'stop', usage: usage(9, 1) }]])
  const turn = [
    { type: 'server_tool_use', id: 'srvtoolu_a', name: 'web_search', input: { query: 'otters' } },
    { type: 'web_search_tool_result', tool_use_id: 'srvtoolu_a', content: { type: 'web_search_tool_result_error', error_code: 'max_uses_exceeded' } },
    { type: 'web_search_tool_result', tool_use_id: 'srvtoolu_nowhere', content: [] },
    { type: 'text', text: 'Rivers.' },
  ]
  const res = await app.inject({ method: 'POST', url: URL, headers: auth, payload: ask({ messages: [{ role: 'user', content: 'Otters?' }, { role: 'assistant', content: turn }, { role: 'user', content: 'Thanks' }] }) })
  t.equal(res.statusCode, 200, res.body)
  t.match(backend.requests[0].messages.slice(-4), [
    { role: 'assistant', toolCalls: [{ id: 'srvtoolu_a' }] },
    { role: 'tool', toolCallId: 'srvtoolu_a', content: /^No search was run: max uses exceeded\./ },
    { role: 'assistant', content: 'Rivers.' },
    { role: 'user', content: 'Thanks' },
  ])
  t.equal(backend.requests[0].messages.filter(m => m.role === 'tool').length, 1, 'the stray result is left out')
})

t.test('streamed: the blocks in order, text before and after the search; the deltas add up to the message', async t => {
  const scripts = [searchCall('otters', 'call_s', 'Let me look.'), answer]
  const { app, auth } = await searchApp(t, scripts)
  const whole = (await app.inject({ method: 'POST', url: URL, headers: auth, payload: ask() })).json()
  t.same(whole.content.map((b: { type: string }) => b.type), ['text', 'server_tool_use', 'web_search_tool_result', 'text'])

  const second = await searchApp(t, scripts)
  const res = await second.app.inject({ method: 'POST', url: URL, headers: second.auth, payload: ask({ stream: true }) })
  t.equal(res.statusCode, 200)
  const events = sseEvents(res.body)
  t.same(events.map(([name, data]) => name === 'content_block_start' ? `start:${data.content_block.type}` : name === 'content_block_delta' ? `delta:${data.delta.type}` : name), [
    'message_start', 'ping',
    'start:text', 'delta:text_delta', 'content_block_stop',
    'start:server_tool_use', 'delta:input_json_delta', 'content_block_stop',
    'start:web_search_tool_result', 'content_block_stop',
    'start:text', 'delta:text_delta', 'delta:text_delta', 'content_block_stop',
    'message_delta', 'message_stop',
  ])
  for (const [name, data] of events) t.equal(name, data.type, `the event name is its type (${name})`)
  t.same(events.filter(([name]) => name.startsWith('content_block')).map(([, data]) => data.index), [0, 0, 0, 1, 1, 1, 2, 2, 3, 3, 3, 3], 'blocks numbered in order')
  t.same(events.find(([, d]) => d.content_block?.type === 'server_tool_use')![1].content_block.input, {}, 'the input comes as its JSON delta, as Anthropic streams it')
  const streamed = accumulateMessage(events)
  t.equal(streamed.content[2].tool_use_id, streamed.content[1].id)
  t.same(withoutIds(streamed), withoutIds(whole), 'the stream adds up to the whole message')
})

t.test('at most three searches per reply whatever max_uses says; max_uses lowers it; a call beyond is a max_uses_exceeded result', async t => {
  const forever = [searchCall('a'), searchCall('b'), searchCall('c'), searchCall('d')]
  const { app, auth, backend, provider } = await searchApp(t, forever)
  const res = await app.inject({ method: 'POST', url: URL, headers: auth, payload: ask({ tools: [{ ...WEB_SEARCH, max_uses: 50 }] }) })
  t.equal(res.statusCode, 200, res.body)
  const message = res.json()
  t.equal(provider.requests.length, 3)
  t.equal(backend.requests.length, 4, 'three searches, four generations')
  t.same(backend.requests.map(r => r.toolChoice), [undefined, 'auto', 'auto', 'none'], 'after the last search the model is told to answer')
  t.same(message.content.map((b: any) => b.type === 'server_tool_use' ? b.input.query : Array.isArray(b.content) ? 'results' : b.content?.error_code ?? b.type),
    ['a', 'results', 'b', 'results', 'c', 'results', 'd', 'max_uses_exceeded'], 'the fourth call is shown refused')
  t.equal(message.stop_reason, 'end_turn')
  t.same(message.usage.server_tool_use, { web_search_requests: 3 })

  const once = await searchApp(t, forever)
  const one = (await once.app.inject({ method: 'POST', url: URL, headers: once.auth, payload: ask({ tools: [{ ...WEB_SEARCH, max_uses: 1 }] }) })).json()
  t.equal(once.provider.requests.length, 1, 'max_uses 1: one search')
  t.same(once.backend.requests.map(r => r.toolChoice), [undefined, 'none'])
  t.same(one.usage.server_tool_use, { web_search_requests: 1 })
  t.equal(one.content.filter((b: any) => b.type === 'web_search_tool_result').at(-1).content.error_code, 'max_uses_exceeded')

  // Two calls in one round past the bound: the first runs, the second is refused and the model told.
  const pair: GenerateEvent[] = [
    { type: 'delta', toolCalls: [{ index: 0, id: 'c1', name: 'web_search', arguments: '{"query":"x"}' }] },
    { type: 'delta', toolCalls: [{ index: 1, id: 'c2', name: 'web_search', arguments: '{"query":"y"}' }] },
    { type: 'finish', reason: 'tool_calls', usage: usage(5, 5) },
  ]
  const both = await searchApp(t, [pair, answer])
  const two = (await both.app.inject({ method: 'POST', url: URL, headers: both.auth, payload: ask({ tools: [{ ...WEB_SEARCH, max_uses: 1 }] }) })).json()
  t.equal(both.provider.requests.length, 1)
  t.same(two.content.map((b: any) => b.type), ['server_tool_use', 'web_search_tool_result', 'server_tool_use', 'web_search_tool_result', 'text'])
  t.same(two.content[3].content, { type: 'web_search_tool_result_error', error_code: 'max_uses_exceeded' })
  t.match(both.backend.requests[1].messages.at(-1), { role: 'tool', toolCallId: 'c2', content: /No search was run: at most 1 searches/ })
})

t.test('allowed_domains and blocked_domains filter the results by host, for the blocks and the model alike', async t => {
  const { app, auth, backend } = await searchApp(t, [searchCall('otters'), answer, searchCall('otters'), answer, searchCall('otters'), answer])
  const allowed = (await app.inject({ method: 'POST', url: URL, headers: auth, payload: ask({ tools: [{ ...WEB_SEARCH, allowed_domains: ['wildlife.net/sea'] }] }) })).json()
  t.same(allowed.content[1].content.map((r: { url: string }) => r.url), ['https://docs.wildlife.net/sea/otters'], 'a domain covers its subdomains; a path must match')
  t.notMatch(backend.requests[1].messages.at(-1)?.content, /example\.org/, 'the model does not get a dropped result')
  const blocked = (await app.inject({ method: 'POST', url: URL, headers: auth, payload: ask({ tools: [{ ...WEB_SEARCH, blocked_domains: ['WILDLIFE.net'] }] }) })).json()
  t.same(blocked.content[1].content.map((r: { url: string }) => r.url), ['https://example.org/otters'])
  const none = (await app.inject({ method: 'POST', url: URL, headers: auth, payload: ask({ tools: [{ ...WEB_SEARCH, allowed_domains: ['example.org/birds'] }] }) })).json()
  t.same(none.content[1].content, [], 'nothing left: an empty result')
  t.match(backend.requests[5].messages.at(-1)?.content, /found nothing/)
})

t.test('refused tool fields: 400 naming the field, in Anthropic\'s shape, before anything runs', async t => {
  const { app, auth, backend, provider } = await searchApp(t, [answer])
  const cases: Array<[Record<string, unknown>, string]> = [
    [{ ...WEB_SEARCH, max_uses: 0 }, 'tools[0].max_uses'],
    [{ ...WEB_SEARCH, max_uses: 1.5 }, 'tools[0].max_uses'],
    [{ ...WEB_SEARCH, allowed_domains: ['a.com'], blocked_domains: ['b.com'] }, 'tools[0].blocked_domains'],
    [{ ...WEB_SEARCH, allowed_domains: ['https://a.com'] }, 'tools[0].allowed_domains[0]'],
    [{ ...WEB_SEARCH, allowed_domains: 'a.com' }, 'tools[0].allowed_domains'],
    [{ ...WEB_SEARCH, blocked_domains: ['ok.com', 'bad domain'] }, 'tools[0].blocked_domains[1]'],
    [{ ...WEB_SEARCH, allowed_domains: Array.from({ length: 101 }, (_, i) => `d${i}.com`) }, 'tools[0].allowed_domains'],
    [{ ...WEB_SEARCH, allowed_domains: ['a'.repeat(100_000)] }, 'tools[0].allowed_domains[0]'],
  ]
  for (const [tool, field] of cases) {
    const res = await app.inject({ method: 'POST', url: URL, headers: auth, payload: ask({ tools: [tool] }) })
    t.equal(res.statusCode, 400, field)
    t.equal(res.json().type, 'error')
    t.equal(res.json().error.type, 'invalid_request_error')
    t.ok(res.json().error.message.startsWith(field), res.body)
  }
  const twice = await app.inject({ method: 'POST', url: URL, headers: auth, payload: ask({ tools: [WEB_SEARCH, { type: 'web_search_20260209', name: 'web_search' }] }) })
  t.equal(twice.statusCode, 400)
  t.match(twice.json().error.message, /tools\[1\]: only one web_search tool/)
  t.equal(backend.requests.length, 0)
  t.equal(provider.requests.length, 0)
})

t.test('a failing provider, a call without a query and a huge query: told to the model, bounded, never a failed reply', async t => {
  const failing = await searchApp(t, [searchCall('otters'), answer], res => { res.writeHead(500); res.end('down') })
  const failed = await failing.app.inject({ method: 'POST', url: URL, headers: failing.auth, payload: ask() })
  t.equal(failed.statusCode, 200, failed.body)
  const message = failed.json()
  t.same(message.content[1].content, { type: 'web_search_tool_result_error', error_code: 'unavailable' })
  t.notOk('server_tool_use' in message.usage, 'a failed search is not counted')
  t.match(failing.backend.requests[1].messages.at(-1), { role: 'tool', content: /Web search failed/ })

  const { app, auth, backend, provider } = await searchApp(t, [searchCall(''), answer, searchCall('otter '.repeat(50_000)), answer])
  const empty = (await app.inject({ method: 'POST', url: URL, headers: auth, payload: ask() })).json()
  t.same(empty.content[1].content, { type: 'web_search_tool_result_error', error_code: 'invalid_tool_input' })
  t.same(empty.content[0].input, { query: '' })
  t.equal(provider.requests.length, 0)
  t.match(backend.requests[1].messages.at(-1), { role: 'tool', content: /No search was run: the call named no query/ })
  const huge = (await app.inject({ method: 'POST', url: URL, headers: auth, payload: ask() })).json()
  t.equal(provider.requests.length, 1)
  const sent = new globalThis.URL(provider.requests[0].path, 'http://x').searchParams.get('q')!
  t.ok(sent.length <= MAX_QUERY_CHARS, `the query sent is cut (${sent.length} characters)`)
  t.equal(huge.content[0].input.query, sent, 'the block shows the query that was run')
})

t.test('a client tool called beside web_search ends the reply for the client; a client tool named web_search wins', async t => {
  const weather = { name: 'get_weather', input_schema: { type: 'object', properties: {} } }
  const mixed: GenerateEvent[] = [
    { type: 'delta', toolCalls: [{ index: 0, id: 'c1', name: 'web_search', arguments: '{"query":"x"}' }] },
    { type: 'delta', toolCalls: [{ index: 1, id: 'c2', name: 'get_weather', arguments: '{}' }] },
    { type: 'finish', reason: 'tool_calls', usage: usage(5, 5) },
  ]
  const { app, auth, provider } = await searchApp(t, [mixed])
  const res = (await app.inject({ method: 'POST', url: URL, headers: auth, payload: ask({ tools: [WEB_SEARCH, weather] }) })).json()
  t.same(res.content.map((b: { type: string; name?: string }) => [b.type, b.name]), [['tool_use', 'get_weather']])
  t.equal(res.stop_reason, 'tool_use')
  t.equal(provider.requests.length, 0)

  const own = await searchApp(t, [searchCall('otters')])
  const mine = { name: 'web_search', input_schema: { type: 'object', properties: { query: { type: 'string' } } } }
  const called = (await own.app.inject({ method: 'POST', url: URL, headers: own.auth, payload: ask({ tools: [WEB_SEARCH, mine] }) })).json()
  t.match(called.content, [{ type: 'tool_use', name: 'web_search', input: { query: 'otters' } }], 'the client\'s own web_search is the client\'s to run')
  t.equal(called.stop_reason, 'tool_use')
  t.equal(own.provider.requests.length, 0)
})

t.test('tool_choice: forcing web_search forces a search, then the model may answer; without a provider the tool is ignored and forcing it is 400', async t => {
  const { app, auth, backend } = await searchApp(t, [searchCall('otters'), answer])
  const res = await app.inject({ method: 'POST', url: URL, headers: auth, payload: ask({ tool_choice: { type: 'tool', name: 'web_search' } }) })
  t.equal(res.statusCode, 200, res.body)
  t.same(backend.requests[0].toolChoice, { type: 'function', function: { name: 'web_search' } })
  t.equal(backend.requests[1].toolChoice, 'auto')

  const plain = new ScriptBackend([answer])
  const bare = await buildTestApp(t, { backends: [plain] })
  const ignored = await bare.app.inject({ method: 'POST', url: URL, headers: bare.auth, payload: ask() })
  t.equal(ignored.statusCode, 200)
  t.same(ignored.json().content.map((b: { type: string }) => b.type), ['text'], 'no provider: the tool is ignored')
  t.notOk('server_tool_use' in ignored.json().usage)
  t.equal(plain.requests[0].tools, undefined, 'nor offered to the model')
  const forced = await bare.app.inject({ method: 'POST', url: URL, headers: bare.auth, payload: ask({ tool_choice: { type: 'tool', name: 'web_search' } }) })
  t.equal(forced.statusCode, 400)
  t.equal(forced.json().error.type, 'invalid_request_error')
  t.match(forced.json().error.message, /tool_choice forces the server tool 'web_search'.*no search provider is configured/)
  t.equal(plain.requests.length, 1, 'nothing generated for the refused request')
})

t.test('Anthropic\'s SDK reads the blocks, whole and streamed', async t => {
  const scripts = [searchCall('otters', 'call_s', 'Searching.'), answer]
  const { app, key } = await searchApp(t, [...scripts, ...scripts])
  await app.listen({ port: 0, host: '127.0.0.1' })
  const { port } = app.server.address() as AddressInfo
  const anthropic = new Anthropic({ apiKey: key, baseURL: `http://127.0.0.1:${port}/api`, maxRetries: 0 })
  const params: Anthropic.MessageCreateParamsNonStreaming = {
    model: 'scripted',
    max_tokens: 256,
    messages: [{ role: 'user', content: 'Where do otters live?' }],
    tools: [{ type: 'web_search_20250305', name: 'web_search', max_uses: 2 }],
  }
  const created = await anthropic.messages.create(params)
  t.same(created.content.map(b => b.type), ['text', 'server_tool_use', 'web_search_tool_result', 'text'])
  const use = created.content[1] as Anthropic.ServerToolUseBlock
  const result = created.content[2] as Anthropic.WebSearchToolResultBlock
  t.same([use.name, use.input], ['web_search', { query: 'otters' }])
  t.equal(result.tool_use_id, use.id)
  t.ok(Array.isArray(result.content) && result.content[0].url === 'https://example.org/otters')
  t.same(created.usage.server_tool_use, { web_search_requests: 1 })

  const stream = anthropic.messages.stream(params)
  const types: string[] = []
  stream.on('streamEvent', event => { if (event.type === 'content_block_start') types.push(event.content_block.type) })
  const streamed = await stream.finalMessage()
  t.same(types, ['text', 'server_tool_use', 'web_search_tool_result', 'text'])
  const plain = (m: unknown) => ({ ...withoutIds(JSON.parse(JSON.stringify(m))), parsed_output: undefined }) // the SDK's own field on a stream
  t.same(plain(streamed), plain(created), 'the SDK\'s accumulation gives the same message')
  t.same((streamed.content[1] as Anthropic.ServerToolUseBlock).input, { query: 'otters' }, 'the input from its JSON delta')
})
