// Clients that go away at random points, on the real stories260k engine: before
// the response head, while waiting in the queue (keep-alive comments only),
// part-way through the text, or after reading it all; streamed and not. The
// points come from a seeded generator (CHATD_DISCONNECT_SEED to replay one).
// Afterwards:
//   - generation has stopped: the in-flight, queue and engine-sequence gauges
//     are back to 0 within seconds;
//   - every request the limits admitted has exactly one usage row (the
//     allowance counter says how many were admitted), none failed, none with
//     more completion tokens than its max_tokens;
//   - every place in the queue is free again: QUEUE_SIZE fresh requests at
//     once are all served.

import t from 'tap'
import { startLoadServer } from '../helpers/load/server.ts'
import { metricSamples, waitForIdle } from '../helpers/load/metrics-scrape.ts'
import { streamChat, type StreamOutcome } from '../helpers/load/sse-client.ts'
import { perDevice } from '../helpers/test-device.ts'

const SEED = Number(process.env.CHATD_DISCONNECT_SEED ?? 20261122)
const QUEUE_SIZE = 24
// Two waves on a software renderer (the WebGPU twin in CI), which decodes ~25x slower.
const WAVES = perDevice({ cpu: 4, webgpu: 2 })
// Long enough that clients leaving after a few kilobytes leave part-way through the text (each
// token is a frame of ~150 bytes), short enough for a software renderer (its WebGPU twin).
const MAX_TOKENS = 120

/** mulberry32: a small seeded generator, so a failing run can be replayed. */
function seeded (seed: number): () => number {
  let a = seed >>> 0
  return () => {
    a = (a + 0x6D2B79F5) >>> 0
    let x = Math.imul(a ^ (a >>> 15), 1 | a)
    x = (x + Math.imul(x ^ (x >>> 7), 61 | x)) ^ x
    return ((x ^ (x >>> 14)) >>> 0) / 4294967296
  }
}

const server = await startLoadServer({
  // MAX_BATCH below QUEUE_SIZE keeps most requests waiting; their streams start at once with keep-alive comments.
  env: { QUEUE_SIZE: String(QUEUE_SIZE), MAX_BATCH: '4', SSE_KEEPALIVE_MS: '20' },
})
t.teardown(() => server.close())
const random = seeded(SEED)
const pick = <T>(items: T[]): T => items[Math.floor(random() * items.length)]

type Plan =
  | { kind: 'stream-ms'; ms: number }
  | { kind: 'stream-bytes'; bytes: number }
  | { kind: 'stream-whole' }
  | { kind: 'json-ms'; ms: number }

function plan (): Plan {
  const kind = pick(['stream-ms', 'stream-bytes', 'stream-bytes', 'stream-bytes', 'stream-whole', 'json-ms'] as const)
  switch (kind) {
    case 'stream-ms': return { kind, ms: Math.floor(random() * 40) } // often before the head arrives
    case 'stream-bytes': return { kind, bytes: Math.floor(random() ** 2 * 4000) } // 0: right at the head; small: keep-alive only
    case 'stream-whole': return { kind }
    case 'json-ms': return { kind, ms: Math.floor(random() * 300) }
  }
}

const body = (): Record<string, unknown> => ({
  model: server.model,
  messages: [{ role: 'user', content: pick(['Once upon a time', 'The little dog', 'Lily and Tom', 'A big red ball']) }],
  max_tokens: MAX_TOKENS,
  temperature: 0.8,
  seed: Math.floor(random() * 1e6),
  stream_options: { include_usage: true },
})

interface Result { plan: Plan; status: number | null; outcome?: StreamOutcome }

async function run (p: Plan): Promise<Result> {
  if (p.kind === 'json-ms') {
    const { stream_options: _, ...json } = body()
    try {
      const res = await fetch(`${server.base}/api/v1/chat/completions`, {
        method: 'POST',
        headers: { authorization: `Bearer ${server.key}`, 'content-type': 'application/json' },
        body: JSON.stringify(json),
        signal: AbortSignal.timeout(p.ms),
      })
      await res.arrayBuffer()
      return { plan: p, status: res.status }
    } catch {
      return { plan: p, status: null }
    }
  }
  const outcome = await streamChat({
    base: server.base,
    key: server.key,
    body: body(),
    ...(p.kind === 'stream-ms' ? { abortAfterMs: p.ms } : p.kind === 'stream-bytes' ? { abortAfterBytes: p.bytes } : {}),
  })
  return { plan: p, status: outcome.status, outcome }
}

t.test(`clients leaving at random points (seed ${SEED}): generation stops, usage is recorded, places are freed`, async t => {
  const results: Result[] = []
  for (let wave = 0; wave < WAVES; wave++) {
    results.push(...await Promise.all(Array.from({ length: QUEUE_SIZE }, () => run(plan()))))
  }
  const streams = results.filter(r => r.outcome)
  t.ok(streams.some(r => r.outcome!.aborted && r.outcome!.status === null), 'some left before the response head')
  t.ok(streams.some(r => r.outcome!.aborted && r.outcome!.status === 200 && r.outcome!.frames === 0), 'some left while waiting (head and keep-alive only)')
  t.ok(streams.some(r => r.outcome!.aborted && r.outcome!.frames > 1), 'some left part-way through the text')
  for (const r of results) {
    if (r.status !== null) t.equal(r.status, 200, `${r.plan.kind}: every response that came is a 200 (${JSON.stringify(r.outcome?.errorBody ?? '')})`)
  }
  for (const r of streams.filter(r => !r.outcome!.aborted)) {
    t.equal(r.outcome!.malformed, undefined, 'a stream read to the end is well-formed')
    t.equal(r.outcome!.networkError, undefined)
  }

  // Generation has stopped everywhere.
  const idle = await waitForIdle(server.base, 10_000)
  t.ok(idle.idle, `gauges back to 0 within 10 s (after ${Math.round(idle.waitedMs)} ms: ${JSON.stringify(idle.gauges)})`)
  const cancelled = metricSamples(idle.text, 'chatd_completions_total').filter(s => s.labels.finish_reason === 'cancelled').reduce((n, s) => n + s.value, 0)
  t.ok(cancelled > 0, `the engine saw the cancellations (${cancelled})`)

  // One usage row per admitted request. The allowance counts each admitted call
  // once (a failed one is given back; none should fail here).
  const usage = await (await fetch(`${server.base}/api/v1/usage`, { headers: { authorization: `Bearer ${server.key}` } })).json() as { used: { calls_this_month: number } }
  const rows = await server.db.selectFrom('usage_records').select(['status', 'completion_tokens', 'error_code']).execute()
  const headed = results.filter(r => r.status === 200).length
  t.equal(rows.length, usage.used.calls_this_month, `a usage row for every admitted request (${rows.length})`)
  t.ok(rows.length >= headed && rows.length <= results.length, `between the ${headed} that got a response head and the ${results.length} sent`)
  t.same(rows.filter(r => r.status === 'failed'), [], 'none failed')
  t.same(rows.filter(r => r.completion_tokens > MAX_TOKENS), [], `no row counts more than max_tokens (${MAX_TOKENS}) completion tokens`)
  const whole = streams.filter(r => !r.outcome!.aborted && r.outcome!.done).map(r => r.outcome!.completionTokens)
  const completedTokens = rows.filter(r => r.status === 'completed').map(r => r.completion_tokens)
  for (const tokens of whole) t.ok(completedTokens.includes(tokens!), `a whole stream's ${tokens} tokens are a completed row`)
  t.ok(rows.some(r => r.status === 'cancelled' && r.completion_tokens > 0), 'abandoned streams are recorded with the tokens generated before they stopped')

  // Every place is free again: QUEUE_SIZE at once are all served.
  const fresh = await Promise.all(Array.from({ length: QUEUE_SIZE }, () => fetch(`${server.base}/api/v1/chat/completions`, {
    method: 'POST',
    headers: { authorization: `Bearer ${server.key}`, 'content-type': 'application/json' },
    body: JSON.stringify({ model: server.model, messages: [{ role: 'user', content: 'Tom' }], max_tokens: 5 }),
  })))
  t.same(fresh.map(r => r.status), fresh.map(() => 200), `${QUEUE_SIZE} fresh requests at once are all admitted`)
  await Promise.all(fresh.map(r => r.arrayBuffer()))
})
