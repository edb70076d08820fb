// The hosted search's rounds hook (src/api/pipeline/hosted-search.ts) is a generator of the reply's
// stream: each search it runs is a `search` event (searching, then done or failed), each call it
// does not run a `refused` one, and what it returns is the calls' results for the next round.
import t from 'tap'
import type { ToolCall } from '../../src/engine/backend.ts'
import { ApiError } from '../../src/errors.ts'
import type { SearchEvent } from '../../src/api/pipeline/events.ts'
import { hostedSearchRounds } from '../../src/api/pipeline/hosted-search.ts'
import type { CallResults } from '../../src/api/pipeline/rounds.ts'
import type { SearchResult } from '../../src/search/provider.ts'
import type { WebSearch } from '../../src/search/web-search.ts'

const call = (id: string, args: string): ToolCall => ({ id, type: 'function', function: { name: 'web_search', arguments: args } })
const found: SearchResult[] = [{ title: 'Oslo', url: 'https://example.com/oslo', snippet: 'Cold.' }]

/** Runs one round's hook to its end: the events it yielded, and what it returned. */
async function run (hook: ReturnType<typeof hostedSearchRounds>, calls: ToolCall[]): Promise<{ events: SearchEvent[], returned: CallResults | undefined }> {
  const events: SearchEvent[] = []
  const generator = hook(calls, new AbortController().signal)
  for (let next = await generator.next(); ; next = await generator.next()) {
    if (next.done === true) return { events, returned: next.value }
    events.push(next.value)
  }
}

t.test('each search is an event of the stream, before and after it runs', async t => {
  const asked: string[] = []
  const search = { search: async (query: string) => { asked.push(query); if (query === 'broken') throw new ApiError('search_failed', 'Web search failed: down.'); return found } } as unknown as WebSearch
  const hook = hostedSearchRounds(search, { scope: '7', maxUses: 2 })
  const first = await run(hook, [call('a', '{"query":"oslo weather"}'), call('b', '{}'), call('c', '{"query":"broken"}')])
  t.same(first.events.map(e => [e.status, e.call.id]), [['searching', 'a'], ['done', 'a'], ['refused', 'b'], ['searching', 'c'], ['failed', 'c']])
  t.same(first.events[1], { type: 'search', status: 'done', call: call('a', '{"query":"oslo weather"}'), query: 'oslo weather', results: found })
  t.match(first.events[2], { why: 'invalid_tool_input' })
  t.same(asked, ['oslo weather', 'broken'], 'a call without a query is not searched')
  t.same(first.returned?.results.map(r => r.toolCallId), ['a', 'b', 'c'], 'every call gets its result')
  t.match(first.returned?.results[2].content, /Web search failed: down\./, 'the model is told the search failed')
  t.equal(first.returned?.toolChoice, 'none', 'its searches used up, the model must answer')
  const after = await run(hook, [call('d', '{"query":"again"}')])
  t.same(after.events.map(e => [e.status, e.status === 'refused' ? e.why : '']), [['refused', 'max_uses_exceeded']])
  t.equal(after.returned, undefined, 'the reply ends')
  const client = await run(hook, [call('e', '{"query":"x"}'), { ...call('f', '{}'), function: { name: 'get_weather', arguments: '{}' } }])
  t.same(client, { events: [], returned: undefined }, 'a round with a client call is the client\'s: nothing run, nothing shown')
})
