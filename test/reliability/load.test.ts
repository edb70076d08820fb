// `npm run load`, bounded for CI: the real server on stories260k with a small
// QUEUE_SIZE, 200 concurrent connections for a few seconds (150 autocannon
// connections sending non-streamed requests back to back, 50 streaming
// clients). chatd must shed what it cannot take and nothing else:
//   - every response is a 200, or a 503/429 with Retry-After and the error
//     body; no other status, no socket error, no timeout;
//   - every admitted stream is well-formed, ending with `data: [DONE]`;
//   - afterwards the in-flight, queue and engine gauges return to 0, memory
//     settles near where it started, and a normal request is served.

import t from 'tap'
import { runLoad } from '../helpers/load/drive.ts'
import { settledMemory } from '../helpers/load/memory.ts'
import { waitForIdle } from '../helpers/load/metrics-scrape.ts'
import { startLoadServer } from '../helpers/load/server.ts'

const QUEUE_SIZE = 8
/** Generous: the RSS of a Node process moves by tens of MB on its own; a leak under this load grows by far more. */
const RSS_GROWTH_LIMIT_MB = 300

const server = await startLoadServer({ env: { QUEUE_SIZE: String(QUEUE_SIZE), MAX_BATCH: '4' } })
t.teardown(() => server.close())

const ask = (maxTokens: number): Promise<Response> => fetch(`${server.base}/api/v1/chat/completions`, {
  method: 'POST',
  headers: { authorization: `Bearer ${server.key}`, 'content-type': 'application/json' },
  body: JSON.stringify({ model: server.model, messages: [{ role: 'user', content: 'Once upon a time' }], max_tokens: maxTokens }),
})

t.test('200 connections against QUEUE_SIZE=8: only 200, 503 or 429 with Retry-After; full recovery', async t => {
  t.equal((await ask(8)).status, 200, 'warm-up request served')
  const before = await settledMemory()

  const result = await runLoad({ base: server.base, key: server.key, model: server.model, connections: 150, streams: 50, durationS: 5, maxTokens: 32 })
  const { nonStreamed, streamed } = result
  t.comment(`non-streamed: ${JSON.stringify(nonStreamed.byStatus)}, streamed: ${JSON.stringify(streamed.byStatus)}`)

  for (const [kind, tally] of [['non-streamed', nonStreamed], ['streamed', streamed]] as const) {
    t.same(Object.keys(tally.byStatus).filter(s => !['200', '429', '503'].includes(s)), [], `${kind}: no status but 200, 429 and 503`)
    t.equal(tally.refusalsWithRetryAfter, tally.refusals, `${kind}: every refusal carries Retry-After`)
    t.equal(tally.violations, 0, `${kind}: no violation (${tally.examples.join('; ')})`)
    t.ok((tally.byStatus['200'] ?? 0) > 0, `${kind}: some requests were served`)
  }
  t.ok((nonStreamed.byStatus['503'] ?? 0) + (streamed.byStatus['503'] ?? 0) > 0, 'the overload was shed with 503')

  const idle = await waitForIdle(server.base, 15_000)
  t.ok(idle.idle, `gauges back to 0 (after ${Math.round(idle.waitedMs)} ms: ${JSON.stringify(idle.gauges)})`)

  const after = await settledMemory()
  t.ok(after.rssMb - before.rssMb < RSS_GROWTH_LIMIT_MB, `RSS settled within ${RSS_GROWTH_LIMIT_MB} MB of before (${before.rssMb} -> ${after.rssMb} MB)`)

  const normal = await ask(16)
  t.equal(normal.status, 200, 'a normal request is served after the load')
  t.match(await normal.json(), { object: 'chat.completion', choices: [{ message: { role: 'assistant' } }] })
})
