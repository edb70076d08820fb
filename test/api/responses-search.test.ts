// The hosted web_search tool on a scripted backend and a loopback SearXNG:
// the model's web_search call is run by chatd, shown as a web_search_call item
// (never as a function_call), its results reach the model as the call's
// result, and the reply goes on in the same usage row; at most three searches
// per response; a failing provider is told to the model, not the client.

import { mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import http from 'node:http'
import { join } from 'node:path'
import t, { type Test } from 'tap'
import type { GenerateEvent } from '../../src/engine/backend.ts'
import { loopbackServer } from '../upstream/loopback.ts'
import { buildResponsesApp, parseEvents, ScriptBackend, usage } from '../helpers/responses-app.ts'

const URL = '/api/v1/responses'
const RESULTS = { results: [{ title: 'Otters', url: 'https://example.org/otters', content: 'Otters live in rivers.' }] }

const searchCall = (query: string, id = 'call_s'): GenerateEvent[] => [
  { type: 'delta', toolCalls: [{ index: 0, id, name: 'web_search' }] },
  { type: 'delta', toolCalls: [{ index: 0, arguments: JSON.stringify({ query }) }] },
  { type: 'finish', reason: 'tool_calls', usage: usage(20, 6) },
]
const answer: GenerateEvent[] = [{ type: 'delta', content: 'Otters live in rivers [1].' }, { type: 'finish', reason: 'stop', usage: usage(40, 7, { cached: 20 }) }]

async function searchApp (t: Test, scripts: GenerateEvent[][], reply: (res: http.ServerResponse) => void = res => {
  res.writeHead(200, { 'content-type': 'application/json' })
  res.end(JSON.stringify(RESULTS))
}, env: Record<string, string> = {}) {
  const server = await loopbackServer(t, (_req, res) => reply(res))
  const backend = new ScriptBackend(scripts)
  const built = await buildResponsesApp(t, { backends: [backend], env: { SEARCH_PROVIDER: 'searxng', SEARXNG_URL: server.url, SEARCH_CACHE_TTL_MS: '0', ...env } })
  return { ...built, backend, server }
}

const tools = [{ type: 'web_search', external_web_access: true }, { type: 'function', name: 'get_weather', parameters: { type: 'object', properties: {} } }]

t.test('a web_search call is run by chatd: a web_search_call item, the results given to the model, one usage row with the rounds summed', async t => {
  const { app, auth, backend, server, db } = await searchApp(t, [searchCall('where do otters live'), answer])
  const res = await app.inject({ method: 'POST', url: URL, headers: auth, payload: { model: 'scripted', input: 'Where do otters live?', tools } })
  t.equal(res.statusCode, 200, res.body)
  const body = res.json()
  t.same(body.output.map((o: { type: string }) => o.type), ['web_search_call', 'message'], 'no function_call item for the hosted tool')
  t.match(body.output[0], { type: 'web_search_call', status: 'completed', action: { type: 'search', query: 'where do otters live' } })
  t.match(body.output[0].id, /^ws_/)
  t.equal(body.output[1].content[0].text, 'Otters live in rivers [1].')
  t.equal(server.requests.length, 1)
  t.match(server.requests[0].path, /q=where(\+|%20)do(\+|%20)otters(\+|%20)live/)
  t.ok(backend.requests[0].tools?.some(tool => tool.function.name === 'web_search'), 'the model is offered a web_search function')
  const round2 = backend.requests[1].messages
  t.match(round2.at(-2), { role: 'assistant', toolCalls: [{ id: 'call_s', function: { name: 'web_search' } }] })
  t.match(round2.at(-1), { role: 'tool', toolCallId: 'call_s', content: /\[1\] Otters\nhttps:\/\/example\.org\/otters\nOtters live in rivers\./ })
  t.same(body.usage, { input_tokens: 60, input_tokens_details: { cached_tokens: 20 }, output_tokens: 13, output_tokens_details: { reasoning_tokens: 0 }, total_tokens: 73 })
  const rows = await db.selectFrom('usage_records').selectAll().execute()
  t.equal(rows.length, 1, 'one request, one usage row')
  t.match(rows[0], { request_id: body.id, prompt_tokens: 60, completion_tokens: 13, status: 'completed' })
})

t.test('streamed: the web_search_call events, then the answer; deltas add up', async t => {
  const { app, auth } = await searchApp(t, [searchCall('otters'), answer])
  const events = parseEvents((await app.inject({ method: 'POST', url: URL, headers: auth, payload: { model: 'scripted', input: 'Otters?', tools, stream: true } })).body)
  t.same(events.map(e => e.event), [
    'response.created', 'response.in_progress',
    'response.output_item.added', 'response.web_search_call.in_progress', 'response.web_search_call.searching', 'response.web_search_call.completed', 'response.output_item.done',
    'response.output_item.added', 'response.content_part.added', 'response.output_text.delta', 'response.output_text.done', 'response.content_part.done', 'response.output_item.done',
    'response.completed',
  ])
  t.same(events.map(e => e.data.sequence_number), events.map((_, i) => i))
  const completed = events.at(-1)!.data.response as { output: Array<{ type: string }> }
  t.same(completed.output.map(o => o.type), ['web_search_call', 'message'])
})

t.test('at most three searches per response; then the reply ends', async t => {
  const { app, auth, backend, server } = await searchApp(t, [searchCall('a'), searchCall('b'), searchCall('c'), searchCall('d')])
  const res = await app.inject({ method: 'POST', url: URL, headers: auth, payload: { model: 'scripted', input: 'Search forever', tools } })
  t.equal(res.statusCode, 200, res.body)
  t.equal(server.requests.length, 3)
  t.equal(backend.requests.length, 4, 'three searches, four generations')
  t.equal(backend.requests[3].toolChoice, 'none', 'after the last search the model is told to answer')
  t.same(res.json().output.filter((o: { type: string }) => o.type === 'web_search_call').length, 3)
})

t.test('max_tool_calls lowers the searches a response may run; a search call beyond it is not run and the reply ends', async t => {
  const { app, auth, backend, server } = await searchApp(t, [searchCall('a'), searchCall('b'), searchCall('c')])
  const res = await app.inject({ method: 'POST', url: URL, headers: auth, payload: { model: 'scripted', input: 'Search twice at most', tools, max_tool_calls: 1 } })
  t.equal(res.statusCode, 200, res.body)
  t.equal(server.requests.length, 1, 'one search run')
  t.equal(backend.requests.length, 2, 'one search, two generations')
  t.equal(backend.requests[1].toolChoice, 'none', 'after its one search the model is told to answer')
  t.equal(res.json().max_tool_calls, 1, 'echoed')
  t.same(res.json().output.filter((o: { type: string }) => o.type === 'web_search_call').length, 1)
})

t.test('a client function called beside web_search ends the reply for the client to run; a failing provider is told to the model', async t => {
  const mixed: GenerateEvent[] = [
    { type: 'delta', toolCalls: [{ index: 0, id: 'c1', name: 'web_search', arguments: '{"query":"x"}' }] },
    { type: 'delta', toolCalls: [{ index: 1, id: 'c2', name: 'get_weather', arguments: '{}' }] },
    { type: 'finish', reason: 'tool_calls', usage: usage(5, 5) },
  ]
  const { app, auth, server } = await searchApp(t, [mixed])
  const res = await app.inject({ method: 'POST', url: URL, headers: auth, payload: { model: 'scripted', input: 'x', tools } })
  t.same(res.json().output.map((o: { type: string; name?: string }) => [o.type, o.name]), [['function_call', 'get_weather']])
  t.equal(server.requests.length, 0)

  const failing = await searchApp(t, [searchCall('otters'), answer], res => { res.writeHead(500); res.end('down') })
  const failed = await failing.app.inject({ method: 'POST', url: URL, headers: failing.auth, payload: { model: 'scripted', input: 'x', tools } })
  t.equal(failed.statusCode, 200, failed.body)
  t.match(failed.json().output[0], { type: 'web_search_call', status: 'failed' })
  t.match(failing.backend.requests[1].messages.at(-1), { role: 'tool', content: /Web search failed/ })
})

t.test('tool_choice web_search forces a search; a client function named web_search wins over the hosted one', async t => {
  const { app, auth, backend } = await searchApp(t, [searchCall('otters'), answer])
  const res = await app.inject({ method: 'POST', url: URL, headers: auth, payload: { model: 'scripted', input: 'x', tools, tool_choice: { type: 'web_search' } } })
  t.equal(res.statusCode, 200, res.body)
  t.same(backend.requests[0].toolChoice, { type: 'function', function: { name: 'web_search' } })
  t.equal(backend.requests[1].toolChoice, 'auto', 'the next round may answer')
  const second = await searchApp(t, [searchCall('otters')])
  const own = await second.app.inject({ method: 'POST', url: URL, headers: second.auth, payload: { model: 'scripted', input: 'x', tools: [{ type: 'web_search' }, { type: 'function', name: 'web_search', parameters: { type: 'object', properties: { q: { type: 'string' } } } }] } })
  t.match(own.json().output[0], { type: 'function_call', name: 'web_search' }, 'the client\'s own web_search is the client\'s to run')
  t.equal(second.server.requests.length, 0)
})

t.test('each later round sends the conversation again, so it must fit the tier\'s minute too; one that does not ends the reply', async t => {
  const dir = mkdtempSync(join(tmpdir(), 'chatd-tiers-'))
  t.teardown(() => rmSync(dir, { recursive: true, force: true }))
  const tiers = join(dir, 'tiers.json')
  writeFileSync(tiers, JSON.stringify({ default: 'tight', tiers: { tight: { tokens_per_minute: 1000, models: ['*'] } } }))
  const { app, accounts, backend, server } = await searchApp(t, [searchCall('otters'), answer], undefined, { TIERS_FILE: tiers })
  const account = await accounts.create({ email: 'tight@example.com', tier: 'tight' })
  const auth = { authorization: `Bearer ${(await accounts.createKey(account.id, { name: 'k' })).key}` }
  // About 700 tokens of prompt: the first round fits the minute, a second (700 more) does not.
  const res = await app.inject({ method: 'POST', url: URL, headers: auth, payload: { model: 'scripted', input: 'Otters? '.repeat(350), tools, max_output_tokens: 50 } })
  t.equal(res.statusCode, 200, res.body)
  t.equal(server.requests.length, 1, 'the search ran')
  t.equal(backend.requests.length, 1, 'the second round was not run')
  t.match(res.json(), { status: 'incomplete', incomplete_details: { reason: 'max_output_tokens' } })
  const usage = await app.inject({ url: '/api/v1/usage', headers: auth })
  t.ok(usage.json().used.tokens_this_minute <= 1000, `the minute's tokens stay within the tier (${usage.json().used.tokens_this_minute})`)
})

t.test('an earlier turn\'s search reaches the model again: by previous_response_id, and sent back as items', async t => {
  const later: GenerateEvent[] = [{ type: 'delta', content: 'In rivers, as I said.' }, { type: 'finish', reason: 'stop', usage: usage(50, 5) }]
  const { app, auth, backend } = await searchApp(t, [searchCall('where do otters live'), answer, later])
  const first = await app.inject({ method: 'POST', url: URL, headers: auth, payload: { model: 'scripted', input: 'Where do otters live?', tools } })
  t.equal(first.statusCode, 200, first.body)
  const next = await app.inject({ method: 'POST', url: URL, headers: auth, payload: { model: 'scripted', previous_response_id: first.json().id, input: 'Sure?' } })
  t.equal(next.statusCode, 200, next.body)
  const searchId = first.json().output[0].id
  const replayed = backend.requests[2].messages
  t.match(replayed.slice(-4), [
    { role: 'assistant', content: '', toolCalls: [{ id: searchId, function: { name: 'web_search', arguments: '{"query":"where do otters live"}' } }] },
    { role: 'tool', toolCallId: searchId, content: /^Web search results for "where do otters live".*\n\n\[1\] \nhttps:\/\/example\.org\/otters$/s },
    { role: 'assistant', content: 'Otters live in rivers [1].' },
    { role: 'user', content: 'Sure?' },
  ], 'the call, the result as links, the answer that followed')

  // Sent back as items (store: false, as Codex does): the same; a failed search tells the model it failed.
  const items = [
    { role: 'user', content: 'Where do otters live?' },
    { type: 'web_search_call', id: 'ws_1', status: 'completed', action: { type: 'search', query: 'otters', sources: [{ type: 'url', url: 'https://example.org/a' }, { type: 'url', url: 42 }] } },
    { type: 'web_search_call', id: 'ws_2', status: 'failed', action: { type: 'search', query: 'otters again' } },
    { type: 'web_search_call', id: 'ws_3', status: 'completed', action: { type: 'search', query: 'no sources kept' } },
    { role: 'assistant', content: 'In rivers.' },
    { role: 'user', content: 'Sure?' },
  ]
  const sent = await searchApp(t, [later])
  const res = await sent.app.inject({ method: 'POST', url: URL, headers: sent.auth, payload: { model: 'scripted', input: items, store: false } })
  t.equal(res.statusCode, 200, res.body)
  t.match(sent.backend.requests[0].messages.slice(-6), [
    { role: 'assistant', content: '', toolCalls: [{ id: 'ws_1' }] },
    { role: 'tool', toolCallId: 'ws_1', content: /\[1\] \nhttps:\/\/example\.org\/a$/ },
    { role: 'assistant', content: '', toolCalls: [{ id: 'ws_2' }] },
    { role: 'tool', toolCallId: 'ws_2', content: /^Web search failed\./ },
    { role: 'assistant', content: 'In rivers.' },
    { role: 'user', content: 'Sure?' },
  ], 'a source without a link is left out; an item with no sources adds nothing')
  t.notMatch(JSON.stringify(sent.backend.requests[0].messages), /no sources kept/)
})

t.test('a search item sent back with thousands of sources: at most 20 links replayed and stored', async t => {
  const later: GenerateEvent[] = [{ type: 'delta', content: 'Yes.' }, { type: 'finish', reason: 'stop', usage: usage(50, 5) }]
  const { app, auth, backend, store } = await searchApp(t, [later])
  const sources = Array.from({ length: 2000 }, (_, i) => ({ type: 'url', url: `https://example.org/${i}` }))
  const input = [{ role: 'user', content: 'x' }, { type: 'web_search_call', id: 'ws_many', status: 'completed', action: { type: 'search', query: 'many', sources } }, { role: 'user', content: 'y' }]
  const res = await app.inject({ method: 'POST', url: URL, headers: auth, payload: { model: 'scripted', input } })
  t.equal(res.statusCode, 200, res.body)
  const result = backend.requests[0].messages.find(m => m.role === 'tool')
  t.equal(result?.content.match(/https:\/\/example\.org\/\d+/g)?.length, 20, 'the model reads 20 links')
  const kept = [...store.records.values()][0].input[1] as { action: { sources: unknown[] } }
  t.equal(kept.action.sources.length, 20, 'and 20 are stored')
})
