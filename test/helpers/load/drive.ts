// Drives a chatd server for a bounded time with two kinds of clients at once:
// autocannon's keep-alive connections sending non-streamed chat completions
// back to back, and a pool of streaming clients that each read their SSE
// stream to the end before starting the next. Every response is checked
// (tally.ts); the result is plain data, so it can cross a worker boundary.

import { Worker } from 'node:worker_threads'
import autocannon from 'autocannon'
import { streamChat } from './sse-client.ts'
import { Tally, type TallySummary } from './tally.ts'

export interface LoadPlan {
  base: string
  key: string
  model: string
  /** autocannon connections sending non-streamed requests (0: none). */
  connections: number
  /** Streaming clients (0: none). */
  streams: number
  durationS: number
  /** max_tokens of every request. */
  maxTokens: number
}

export interface LoadResult {
  durationS: number
  nonStreamed: TallySummary
  streamed: TallySummary
}

const PROMPTS = ['Once upon a time', 'The little dog', 'Lily and Tom went to the park', 'A big red ball', 'The sun was shining']

function chatBody (plan: LoadPlan, prompt: string): Record<string, unknown> {
  return { model: plan.model, messages: [{ role: 'user', content: prompt }], max_tokens: plan.maxTokens, temperature: 0.8 }
}

export async function runLoad (plan: LoadPlan): Promise<LoadResult> {
  const started = performance.now()
  const [nonStreamed, streamed] = await Promise.all([
    plan.connections > 0 ? nonStreamedLoad(plan) : new Tally().summary(),
    plan.streams > 0 ? streamedLoad(plan) : new Tally().summary(),
  ])
  return { durationS: (performance.now() - started) / 1000, nonStreamed, streamed }
}

async function nonStreamedLoad (plan: LoadPlan): Promise<TallySummary> {
  const tally = new Tally()
  const headers = { authorization: `Bearer ${plan.key}`, 'content-type': 'application/json' }
  const onResponse = (status: number, body: string, _context: object, responseHeaders: Record<string, unknown> | undefined): void => {
    let parsed: unknown
    try { parsed = JSON.parse(body) } catch { parsed = body }
    if (status !== 200) {
      tally.response({ status, retryAfter: headerValue(responseHeaders, 'retry-after'), errorBody: parsed })
      return
    }
    const completion = parsed as { object?: string; usage?: { completion_tokens?: number } } | null
    const tokens = completion?.usage?.completion_tokens
    const problem = completion?.object === 'chat.completion' && typeof tokens === 'number' ? undefined : `not a chat.completion: ${body.slice(0, 120)}`
    tally.response({ status, problem, completionTokens: tokens })
  }
  const options: autocannon.Options = {
    url: plan.base,
    connections: plan.connections,
    duration: plan.durationS,
    // An admitted request may wait behind QUEUE_SIZE others; a timeout here would be the client's impatience, not a server fault.
    timeout: 120,
    requests: PROMPTS.map(prompt => ({ method: 'POST', path: '/api/v1/chat/completions', headers, body: JSON.stringify(chatBody(plan, prompt)), onResponse })),
  }
  const result = await new Promise<autocannon.Result>((resolve, reject) => {
    const instance = autocannon(options, (err, done) => { if (err) reject(err); else resolve(done) })
    instance.on('response', (_client, status, _bytes, responseTime) => { if (status === 200) tally.latency(responseTime) })
    instance.on('reqError', (err: Error) => tally.violation(`connection error: ${err.message}`))
  })
  if (result.timeouts > 0) tally.violation(`${result.timeouts} request(s) timed out after 120 s`)
  return tally.summary()
}

async function streamedLoad (plan: LoadPlan): Promise<TallySummary> {
  const tally = new Tally()
  const endAt = performance.now() + plan.durationS * 1000
  const client = async (index: number): Promise<void> => {
    for (let n = 0; performance.now() < endAt; n++) {
      const outcome = await streamChat({
        base: plan.base,
        key: plan.key,
        body: { ...chatBody(plan, PROMPTS[(index + n) % PROMPTS.length]), stream_options: { include_usage: true } },
      })
      const problem = outcome.networkError ?? outcome.malformed
      tally.response({ status: outcome.status, retryAfter: outcome.retryAfter, errorBody: outcome.errorBody, problem, completionTokens: outcome.completionTokens })
      if (outcome.status === 200) {
        tally.latency(outcome.latencyMs)
        if (outcome.ttftMs !== undefined) tally.ttft(outcome.ttftMs)
      } else {
        // autocannon's connections retry at once; streaming clients keep up the same pressure,
        // pausing only so that a refused or failed client does not spin.
        await new Promise(resolve => setTimeout(resolve, 10))
      }
    }
  }
  await Promise.all(Array.from({ length: plan.streams }, (_, i) => client(i)))
  return tally.summary()
}

function headerValue (headers: Record<string, unknown> | undefined, name: string): string | null {
  for (const [key, value] of Object.entries(headers ?? {})) {
    if (key.toLowerCase() === name) return Array.isArray(value) ? String(value[0]) : String(value)
  }
  return null
}

/** runLoad on a thread of its own (drive-worker.ts). */
export async function runLoadInWorker (plan: LoadPlan): Promise<LoadResult> {
  const worker = new Worker(new URL('./drive-worker.ts', import.meta.url), { workerData: plan })
  try {
    return await new Promise<LoadResult>((resolve, reject) => {
      worker.once('message', resolve)
      worker.once('error', reject)
      worker.once('exit', code => reject(new Error(`the load worker exited (code ${code}) without a result`)))
    })
  } finally {
    await worker.terminate()
  }
}
