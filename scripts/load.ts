// npm run load: chatd under more concurrent clients than it will take.
//
// Starts the real server in this process (startServer on a free port, a temp
// SQLite database, an account and key, the stories260k model: a real 260K
// Llama, fast on CPU, so the HTTP side and the queue are what is measured) and
// drives it for a bounded time from a worker thread with autocannon
// connections sending non-streamed chat completions back to back plus a pool
// of streaming clients reading every SSE stream to its end. Then it checks the
// server's promises under overload: every response a 200 or a 503/429 with
// Retry-After and the error body, admitted streams well-formed to
// `data: [DONE]`, the in-flight/queue/engine gauges back to 0, memory back near
// where it started, and a normal request served. Prints a table; --json FILE
// writes the figures. Exits 1 when a promise was broken.
//
//   npm run load -- [--connections 200] [--streams 100] [--duration 30] [--max-tokens 32]
//                   [--queue-size 64] [--max-batch 8] [--json FILE]
import fs from 'node:fs'
import os from 'node:os'
import { runLoadInWorker } from '../test/helpers/load/drive.ts'
import { memoryNow, PeakMemory, settledMemory, type MemoryFigures } from '../test/helpers/load/memory.ts'
import { metricSamples, waitForIdle } from '../test/helpers/load/metrics-scrape.ts'
import { startLoadServer } from '../test/helpers/load/server.ts'
import type { TallySummary } from '../test/helpers/load/tally.ts'
import { scriptArgs } from './script-args.ts'

const { values } = scriptArgs(import.meta.url, {
  options: {
    connections: { type: 'string', default: '200' },
    streams: { type: 'string', default: '100' },
    duration: { type: 'string', default: '30' },
    'max-tokens': { type: 'string', default: '32' },
    'queue-size': { type: 'string', default: '64' },
    'max-batch': { type: 'string', default: '8' },
    json: { type: 'string' },
  },
})
const plan = {
  connections: Number(values.connections),
  streams: Number(values.streams),
  durationS: Number(values.duration),
  maxTokens: Number(values['max-tokens']),
}
const settings = { QUEUE_SIZE: values['queue-size'], MAX_BATCH: values['max-batch'] }
/** How long the gauges get to come back to 0 once the clients stop. */
const IDLE_DEADLINE_MS = 30_000

const loadBefore = os.loadavg()
const server = await startLoadServer({ env: settings, logger: { level: 'error' } })
const ask = (): Promise<Response> => fetch(`${server.base}/api/v1/chat/completions`, {
  method: 'POST',
  headers: { authorization: `Bearer ${server.key}`, 'content-type': 'application/json' },
  body: JSON.stringify({ model: server.model, messages: [{ role: 'user', content: 'Once upon a time' }], max_tokens: plan.maxTokens }),
})
await (await ask()).arrayBuffer() // warm-up: the first run allocates the engine's buffers

console.error(`driving ${server.base} for ${plan.durationS} s: ${plan.connections} non-streamed connections + ${plan.streams} streams ...`)
const before = await settledMemory()
const peakWatch = new PeakMemory()
const result = await runLoadInWorker({ base: server.base, key: server.key, model: server.model, ...plan })
const peak = peakWatch.stop()
const loadAfter = os.loadavg()
const idle = await waitForIdle(server.base, IDLE_DEADLINE_MS)
const after = await settledMemory()
const recovery = await ask()
const recoveryStatus = recovery.status
await recovery.arrayBuffer()
const finalText = idle.text
await server.close()

// ---- figures ------------------------------------------------------------------
const { nonStreamed, streamed } = result
const seconds = result.durationS
const total = (key: keyof Pick<TallySummary, 'responses' | 'refusals' | 'refusalsWithRetryAfter' | 'completionTokens' | 'violations'>): number => nonStreamed[key] + streamed[key]
const byCode = Object.fromEntries(metricSamples(finalText, 'chatd_errors_total').map(s => [s.labels.code, s.value]))
// The server's own count of chat-completion answers by status, to set beside what the clients saw.
const serverStatuses = Object.fromEntries(metricSamples(finalText, 'chatd_http_requests_total')
  .filter(s => s.labels.route === '/api/v1/chat/completions').map(s => [s.labels.status, s.value]))
const report = {
  machine: `${os.cpus().length} cores, ${process.platform} ${process.arch}`,
  load_average_before: loadBefore.map(round2),
  load_average_after: loadAfter.map(round2),
  model: server.model,
  settings: { ...plan, queueSize: Number(settings.QUEUE_SIZE), maxBatch: Number(settings.MAX_BATCH) },
  duration_s: round2(seconds),
  requests_per_s: round2(total('responses') / seconds),
  served_per_s: round2(((nonStreamed.byStatus['200'] ?? 0) + (streamed.byStatus['200'] ?? 0)) / seconds),
  tokens_per_s: round2(total('completionTokens') / seconds),
  non_streamed: nonStreamed,
  streamed,
  refusals: total('refusals'),
  refusals_with_retry_after: total('refusalsWithRetryAfter'),
  violations: total('violations'),
  memory_mb: { before, peak, after, note: 'RSS: the whole process (server, engine thread and load clients); heap: the server thread only' },
  after_load: {
    idle: idle.idle,
    idle_after_ms: Math.round(idle.waitedMs),
    gauges: idle.gauges,
    normal_request_status: recoveryStatus,
    errors_total_by_code: byCode,
    chat_responses_by_status: serverStatuses,
  },
}

const ok = report.violations === 0 && idle.idle && recoveryStatus === 200

// ---- table ----------------------------------------------------------------------
const pct = (p: { p50: number | null; p95: number | null; p99: number | null } | undefined): string => p ? `${p.p50 ?? '-'} / ${p.p95 ?? '-'} / ${p.p99 ?? '-'}` : '-'
const row = (name: string, s: TallySummary): string => {
  const other = Object.entries(s.byStatus).filter(([k]) => !['200', '429', '503'].includes(k)).reduce((n, [, v]) => n + v, 0)
  return `| ${name} | ${s.responses} | ${round2(s.responses / seconds)} | ${s.byStatus['200'] ?? 0} | ${s.byStatus['503'] ?? 0} | ${s.byStatus['429'] ?? 0} | ${other} | ${s.refusalsWithRetryAfter}/${s.refusals} | ${round2(s.completionTokens / seconds)} | ${pct(s.latencyMs)} | ${pct(s.ttftMs)} |`
}
const mem = (m: MemoryFigures): string => `${m.rssMb} / ${m.heapUsedMb}`
console.log(`\nchatd load: ${plan.connections} non-streamed connections + ${plan.streams} streaming clients for ${plan.durationS} s against ${server.model}`)
console.log(`QUEUE_SIZE ${settings.QUEUE_SIZE}, MAX_BATCH ${settings.MAX_BATCH}, max_tokens ${plan.maxTokens}; ${report.machine}; load average before ${report.load_average_before.join(' ')}, after ${report.load_average_after.join(' ')}\n`)
console.log('| clients | responses | req/s | 200 | 503 | 429 | other | Retry-After on 429/503 | tokens/s | latency p50 / p95 / p99 ms (200s) | TTFT p50 / p95 / p99 ms |')
console.log('|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|')
console.log(row('non-streamed', nonStreamed))
console.log(row('streamed', streamed))
console.log(`\nthroughput: ${report.requests_per_s} responses/s, ${report.served_per_s} completions/s, ${report.tokens_per_s} tokens/s`)
console.log(`memory, RSS / server heap MB: before ${mem(before)}, peak ${mem(peak)}, after ${mem(after)} (now ${mem(memoryNow())})`)
console.log(`after the load: gauges ${idle.idle ? 'idle' : 'NOT idle'} after ${report.after_load.idle_after_ms} ms ${JSON.stringify(idle.gauges)}; a normal request: ${recoveryStatus}`)
console.log(`server side: chat completions by status ${JSON.stringify(serverStatuses)}, chatd_errors_total ${JSON.stringify(byCode)}`)
const examples = [...nonStreamed.examples.map(e => `non-streamed: ${e}`), ...streamed.examples.map(e => `streamed: ${e}`)]
console.log(report.violations === 0 ? 'violations: none' : `violations: ${report.violations}\n  ${examples.join('\n  ')}`)
if (values.json) {
  fs.writeFileSync(values.json, JSON.stringify(report, null, 2) + '\n')
  console.log(`\nwrote ${values.json}`)
}
process.exitCode = ok ? 0 : 1

function round2 (x: number): number {
  return Math.round(x * 100) / 100
}
