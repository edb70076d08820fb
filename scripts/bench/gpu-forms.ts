// The GPU forms side by side, on onnxruntime directly (no server): the time of a
// decode step (one stream, and 8 rows in one run), a prompt in one run and in
// 31-token runs, and on the GPU a long prompt on one row in runs of each size in
// --long-runs (the engine feeds a lone prompt 512 tokens a run), for chatd's GPU
// form (gqa-masked), the earlier form with plain attention, the GPU form for rows
// without padding (gqa-causal: no mask, GroupQueryAttention rotating q and k itself
// from the packed projection, so with its cache in place the provider splits, rotates
// and writes the cache in one kernel; exact for unpadded rows alone, so measured, never
// served) and the GPU form with int8 activations (onnxruntime's integer-product
// kernels); each against the CPU provider's logits and greedy tokens on the same
// file (gqa-causal against gqa-masked's), and the long prompt's last logits against
// gqa-masked's on the GPU and, for each run size, against the CPU's (the GPU form on the
// CPU, in the CPU engine's 512-token runs): whether larger runs on a GPU stay exact. On
// the GPU it also times decode steps at the long prompt's context (an agent's), and
// runs the GPU form with its cache in place (one fixed GPU buffer per layer's keys and
// values, passed as the run's past and its present, which GroupQueryAttention then
// writes into instead of copying the whole cache into a new buffer every run; the
// buffers a graph capture would need). It is how the GPU form is chosen by measurement on a
// machine (docs/performance.md); scripts/gpu-check.sh runs it as its `forms` step,
// before the server benchmark.
//
// onnxruntime keeps one WebGPU device per process, set up by the first session, so
// every variant runs in a child process of its own.
//
//   node scripts/bench/gpu-forms.ts [--model-config FILE] [--prompt 128] [--gen 64]
//     [--long 4096] [--long-runs 512,2048] [--json FILE]
import { execFileSync } from 'node:child_process'
import fs from 'node:fs'
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import ort from 'onnxruntime-node'
import { benchModelDir } from '../bench-model.ts'
import { GQA_SOFTWARE_EXACT_TOKENS } from '../../src/engine/onnx/device/decoder-session.ts'
import { GpuBuffers } from '../../src/engine/onnx/device/gpu-buffers.ts'
import { argmax } from '../../src/engine/onnx/sampling/sampler.ts'
import { median } from './rounds.ts'
import { scriptArgs } from '../script-args.ts'

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..')
/** Tokens per run where gqa-masked graphs stay exact on a software renderer (DecoderSession.tokensPerRunLimit). */
const CHUNK = GQA_SOFTWARE_EXACT_TOKENS
const BATCH = 8

type Form = 'gqa-masked' | 'standard' | 'gqa-causal' | 'gqa-masked-int8'
/**
 * `ref`: the CPU variant whose logits and tokens this one is compared with. `inPlace`: the cache is
 * one fixed GPU buffer per layer's keys and values, with room for every position the run will
 * hold, given as each run's past and as its present.N.* (onnxruntime-node takes preallocated
 * outputs when no preferredOutputLocation is set): GroupQueryAttention then writes the new
 * positions into it where they go (its shared past/present buffer) instead of copying the whole
 * cache into a new buffer every run.
 */
interface Variant { name: string; form: Form; device: 'webgpu' | 'cpu'; ref?: string; inPlace?: boolean }

// (Dawn's validation off and 64 dispatches a submit were measured on 2026-11-27 and gave
// nothing measurable: docs/performance.md.)
const VARIANTS: Variant[] = [
  { name: 'standard, cpu', form: 'standard', device: 'cpu' },
  { name: 'gqa-masked, cpu', form: 'gqa-masked', device: 'cpu' },
  { name: 'gqa-masked-int8, cpu', form: 'gqa-masked-int8', device: 'cpu' },
  { name: 'standard', form: 'standard', device: 'webgpu', ref: 'standard, cpu' },
  { name: 'gqa-masked', form: 'gqa-masked', device: 'webgpu', ref: 'gqa-masked, cpu' },
  { name: 'gqa-masked, cache in place', form: 'gqa-masked', device: 'webgpu', ref: 'gqa-masked, cpu', inPlace: true },
  { name: 'gqa-causal, cache in place', form: 'gqa-causal', device: 'webgpu', ref: 'gqa-masked, cpu', inPlace: true },
  { name: 'gqa-masked-int8', form: 'gqa-masked-int8', device: 'webgpu', ref: 'gqa-masked-int8, cpu' },
]
/** The long prompt's last logits are compared with this variant's (the GPU form's). */
const LONG_REF = 'gqa-masked'
/** The CPU variant that computes the long prompt too (in the CPU engine's runs), for the GPU's exactness at each run size. */
const LONG_CPU_REF = 'gqa-masked, cpu'
const CPU_LONG_RUN = 512
/** Decode steps timed after the long prompt on the GPU. */
const LONG_DECODE = 32

interface Measured {
  load_s: number
  /** Last-position logits of the prompt fed in one run, and in CHUNK-token runs (first 4096 entries). */
  logits_single: number[]
  logits_chunked: number[]
  prompt_ms_single: number
  prompt_ms_chunked: number
  decode_ms: number[]
  tokens: number[]
  batch_decode_ms: number[]
  /** The long prompt (GPU only): ms for each run size, and the last logits (first 4096 entries) of the first. */
  long_ms?: Record<string, number>
  logits_long?: number[]
  /** The long prompt's last logits (first 4096 entries) and greedy next token for each run size; on the CPU, runs of 512. */
  logits_long_by_run?: Record<string, number[]>
  next_token_long_by_run?: Record<string, number>
  /** GPU only: decode steps on one row after the long prompt (an agent's context), ms each. */
  long_decode_ms?: number[]
}

const { values } = scriptArgs(import.meta.url, {
  options: {
    'model-config': { type: 'string' },
    prompt: { type: 'string', default: '128' },
    gen: { type: 'string', default: '64' },
    long: { type: 'string', default: '4096' },
    'long-runs': { type: 'string', default: '512,2048' },
    json: { type: 'string' },
    variant: { type: 'string' },
    'result-file': { type: 'string' },
  },
})
const prompt = Number(values.prompt)
const gen = Number(values.gen)
const long = Number(values.long)
const longRuns = (values['long-runs'] as string).split(',').map(Number)
const config = values['model-config'] && path.resolve(values['model-config'])

if (values.variant !== undefined) {
  // A file, not stdout: Dawn and onnxruntime write warnings there.
  const result = await measure(VARIANTS[Number(values.variant)])
  fs.writeFileSync(values['result-file'] as string, JSON.stringify(result))
  process.exit(0)
}

const modelDir = (form: Form): string => form === 'gqa-masked-int8'
  ? benchModelDir(32, 'chatd', { gpu: true, config, gpuInt8: true })
  : benchModelDir(32, 'chatd', { gpu: true, config, gpuAttention: form })
for (const form of ['gqa-masked', 'standard', 'gqa-causal', 'gqa-masked-int8'] as const) modelDir(form)
const results: Record<string, unknown> = {}
const jsonPath = values.json ?? path.join(ROOT, 'bench-out', 'gpu-forms.json')
const save = (partial: boolean): void => {
  fs.mkdirSync(path.dirname(jsonPath), { recursive: true })
  fs.writeFileSync(jsonPath, JSON.stringify({ ...(partial ? { partial: true } : {}), date: new Date().toISOString(), prompt_tokens: prompt, generated: gen, batch: BATCH, chunk: CHUNK, long_prompt_tokens: long, long_runs: longRuns, variants: results }, null, 2) + '\n')
}
const measured: Record<string, Measured> = {}
// The CPU references first, so each GPU variant is compared as it comes.
for (const [i, v] of VARIANTS.entries()) {
  const started = performance.now()
  let m: Measured
  try {
    const resultFile = `${jsonPath}.variant-${i}`
    execFileSync(process.execPath, [fileURLToPath(import.meta.url), '--variant', String(i), '--result-file', resultFile, '--prompt', String(prompt), '--gen', String(gen),
      '--long', String(long), '--long-runs', longRuns.join(','), ...(config ? ['--model-config', config] : [])],
    { stdio: ['ignore', 'inherit', 'inherit'], env: { ...process.env, CHATD_GPU_FORMS_MODEL: modelDir(v.form) } })
    m = JSON.parse(fs.readFileSync(resultFile, 'utf8'))
    fs.rmSync(resultFile)
  } catch (err) {
    results[v.name] = { error: (err as Error).message.slice(0, 500) }
    console.error(`${v.name}: failed (${(err as Error).message.slice(0, 200)})`)
    save(true)
    continue
  }
  measured[v.name] = m
  const ref = v.ref === undefined ? undefined : measured[v.ref]
  const longRef = measured[LONG_REF]
  // Only comparable where the weights are the CPU reference's (not the int8 variant's).
  const cpuLong = v.device === 'webgpu' && v.ref === LONG_CPU_REF ? measured[LONG_CPU_REF]?.logits_long_by_run?.[String(CPU_LONG_RUN)] : undefined
  const cpuNext = measured[LONG_CPU_REF]?.next_token_long_by_run?.[String(CPU_LONG_RUN)]
  const summary = {
    form: v.form,
    device: v.device,
    load_s: m.load_s,
    prompt_ms_single: m.prompt_ms_single,
    prompt_ms_chunked: m.prompt_ms_chunked,
    prompt_tok_s_single: prompt / m.prompt_ms_single * 1000,
    prompt_tok_s_chunked: prompt / m.prompt_ms_chunked * 1000,
    decode_ms_median: median(m.decode_ms),
    decode_ms_min: Math.min(...m.decode_ms),
    decode_ms_max: Math.max(...m.decode_ms),
    decode_tok_s: 1000 / median(m.decode_ms),
    [`decode_${BATCH}_rows_ms_median`]: median(m.batch_decode_ms),
    [`decode_${BATCH}_rows_tok_s`]: BATCH * 1000 / median(m.batch_decode_ms),
    ...(ref
      ? {
          compared_with: v.ref,
          max_logit_diff_vs_cpu_single: maxDiff(m.logits_single, ref.logits_single),
          max_logit_diff_vs_cpu_chunked: maxDiff(m.logits_chunked, ref.logits_chunked),
          tokens_equal_cpu: JSON.stringify(m.tokens) === JSON.stringify(ref.tokens),
        }
      : {}),
    ...(m.long_ms
      ? {
          long_prompt_ms: m.long_ms,
          long_prompt_tok_s: Object.fromEntries(Object.entries(m.long_ms).map(([runs, ms]) => [runs, long / ms * 1000])),
          ...(m.long_decode_ms ? { long_decode_ms_median: median(m.long_decode_ms), long_decode_tok_s: 1000 / median(m.long_decode_ms) } : {}),
          ...(longRef?.logits_long && v.name !== LONG_REF ? { max_long_logit_diff_vs_gqa_masked: maxDiff(m.logits_long!, longRef.logits_long) } : {}),
          ...(cpuLong && m.logits_long_by_run
            ? {
                max_long_logit_diff_vs_cpu: Object.fromEntries(Object.entries(m.logits_long_by_run).map(([size, l]) => [size, maxDiff(l, cpuLong)])),
                long_next_token_equals_cpu: Object.fromEntries(Object.entries(m.next_token_long_by_run ?? {}).map(([size, token]) => [size, token === cpuNext])),
              }
            : {}),
        }
      : {}),
    wall_s: (performance.now() - started) / 1000,
  }
  results[v.name] = summary
  console.error(`${v.name}: ${JSON.stringify(summary)}`)
  save(true)
}
save(false)
console.error(`wrote ${path.relative(process.cwd(), jsonPath)}`)

function maxDiff (a: number[], b: number[]): number {
  let worst = 0
  for (let i = 0; i < Math.min(a.length, b.length); i++) worst = Math.max(worst, Math.abs(a[i] - b[i]))
  return worst
}

/** One variant, in this (child) process. */
async function measure (v: Variant): Promise<Measured> {
  const dir = process.env.CHATD_GPU_FORMS_MODEL as string
  const model = path.join(dir, 'onnx', 'model_q4.onnx')
  const cfg = JSON.parse(fs.readFileSync(path.join(dir, 'config.json'), 'utf8'))
  const layers: number = cfg.num_hidden_layers
  const kvHeads: number = cfg.num_key_value_heads
  const headDim: number = cfg.head_dim ?? cfg.hidden_size / cfg.num_attention_heads
  const cacheNames = Array.from({ length: layers }, (_, i) => [`present.${i}.key`, `present.${i}.value`]).flat()
  const gpu = v.device === 'webgpu'
  const inPlace = v.inPlace === true
  const started = performance.now()
  const session = await ort.InferenceSession.create(model, {
    executionProviders: [gpu ? 'webgpu' : 'cpu'],
    graphOptimizationLevel: 'all',
    ...(gpu && !inPlace ? { preferredOutputLocation: Object.fromEntries([...cacheNames.map(n => [n, 'gpu-buffer']), ['logits', 'cpu'], ['cache_delta', 'cpu']]) } : {}),
  } as ort.InferenceSession.SessionOptions)
  const loadS = (performance.now() - started) / 1000
  const int64 = (rows: number[][]) => new ort.Tensor('int64', BigInt64Array.from(rows.flat(), BigInt), [rows.length, rows[0].length])
  type Cache = Record<string, ort.Tensor>
  // In place: zero-filled GPU buffers [rows, kv heads, room, head_dim], made as the engine makes them.
  const buffers = inPlace ? await GpuBuffers.open() : null
  /** An empty cache for `rows`; in place, with `room` positions. */
  const empty = async (rows: number, room = 0): Promise<Cache> => {
    const cache: Cache = Object.fromEntries(Array.from({ length: layers }, (_, i) => ['key', 'value'].map(kv => [`past_key_values.${i}.${kv}`, new ort.Tensor('float32', new Float32Array(0), [rows, kvHeads, 0, headDim])])).flat())
    if (buffers) for (const name of Object.keys(cache)) cache[name] = await buffers.padded(cache[name], room)
    return cache
  }
  const dispose = (cache: Cache) => { for (const t of Object.values(cache)) if (t.location === 'gpu-buffer') t.dispose() }
  /** Feeds `ids` (rows of equal length) after `past` positions; returns the last logits of row 0 and the new cache (in place: the same). */
  const run = async (ids: number[][], cache: Cache, past: number) => {
    const feeds = {
      input_ids: int64(ids),
      attention_mask: int64(ids.map(row => new Array(past + row.length).fill(1))),
      position_ids: int64(ids.map(row => row.map((_, k) => past + k))),
      num_logits_to_keep: new ort.Tensor('int64', BigInt64Array.of(1n), []),
      ...cache,
    }
    const out = inPlace
      ? await session.run(feeds, { logits: null, cache_delta: null, ...Object.fromEntries(cacheNames.map(n => [n, cache[n.replace('present', 'past_key_values')]])) })
      : await session.run(feeds)
    const logits = out.logits.data as Float32Array
    if (inPlace) return { logits: logits.slice(0, cfg.vocab_size), next: cache }
    const next: Cache = {}
    for (let i = 0; i < layers; i++) for (const kv of ['key', 'value']) next[`past_key_values.${i}.${kv}`] = out[`present.${i}.${kv}`]
    dispose(cache)
    return { logits: logits.slice(0, cfg.vocab_size), next }
  }
  const ids = Array.from({ length: prompt }, (_, i) => 1000 + ((i * 7919) % 50000))
  // Warm-up: shaders compiled and buffers allocated for each shape used below.
  dispose((await run([ids.slice(0, CHUNK)], await empty(1, prompt), 0)).next)
  dispose((await run([ids], await empty(1, prompt), 0)).next)

  let t0 = performance.now()
  const single = await run([ids], await empty(1, prompt), 0)
  const promptMsSingle = performance.now() - t0
  dispose(single.next)

  /** `tokens` fed on one row in runs of `size`, timed; returns the cache and the last logits. */
  const inRuns = async (tokens: number[], size: number, room = tokens.length): Promise<{ ms: number; cache: Cache; last: Float32Array }> => {
    let cache = await empty(1, room)
    const started = performance.now()
    let last = new Float32Array(0)
    for (let at = 0; at < tokens.length; at += size) {
      const out = await run([tokens.slice(at, at + size)], cache, at)
      cache = out.next
      last = out.logits
    }
    return { ms: performance.now() - started, cache, last }
  }
  const chunked = await inRuns(ids, CHUNK, prompt + gen)
  let cache = chunked.cache
  const last = chunked.last
  const promptMsChunked = chunked.ms

  const tokens: number[] = []
  const decodeMs: number[] = []
  let token = argmax(last)
  for (let step = 0; step < gen; step++) {
    tokens.push(token)
    t0 = performance.now()
    const out = await run([[token]], cache, prompt + step)
    decodeMs.push(performance.now() - t0)
    cache = out.next
    token = argmax(out.logits)
  }
  dispose(cache)

  // BATCH rows decoding together (a first run of CHUNK tokens each, then one token a row a step).
  const rows = Array.from({ length: BATCH }, (_, b) => ids.slice(b, b + CHUNK))
  let batch = (await run(rows, await empty(BATCH, CHUNK + 32), 0)).next
  const batchMs: number[] = []
  for (let step = 0; step < Math.min(gen, 32); step++) {
    t0 = performance.now()
    const out = await run(rows.map((_, b) => [2000 + b + step]), batch, CHUNK + step)
    batchMs.push(performance.now() - t0)
    batch = out.next
  }
  dispose(batch)

  // The long prompt on one row, in runs of each size: on the GPU; on the CPU only for the
  // reference the GPU's runs are compared with, in the CPU engine's run size.
  let longMs: Record<string, number> | undefined
  let logitsLong: Float32Array | undefined
  const byRun: Record<string, number[]> = {}
  const nextByRun: Record<string, number> = {}
  let longDecodeMs: number[] | undefined
  const sizes = gpu ? longRuns : v.name === LONG_CPU_REF ? [CPU_LONG_RUN] : []
  const longIds = Array.from({ length: long }, (_, i) => 1000 + ((i * 104729) % 50000))
  for (const size of long > 0 ? sizes : []) {
    longMs ??= {}
    if (gpu) {
      // Warm-up: a first run and one on a past, in this run size.
      const first = await run([longIds.slice(0, size)], await empty(1, 2 * size), 0)
      dispose((await run([longIds.slice(size, 2 * size)], first.next, size)).next)
    }
    const timed = await inRuns(longIds, size, long + LONG_DECODE + 1)
    longMs[String(size)] = timed.ms
    if (gpu && longDecodeMs === undefined) {
      // Decode steps at the long prompt's context (the first run size's cache).
      longDecodeMs = []
      let cache = timed.cache
      let token = argmax(timed.last)
      for (let step = 0; step < LONG_DECODE; step++) {
        const t0 = performance.now()
        const out = await run([[token]], cache, long + step)
        longDecodeMs.push(performance.now() - t0)
        cache = out.next
        token = argmax(out.logits)
      }
      dispose(cache)
    } else dispose(timed.cache)
    logitsLong ??= timed.last
    byRun[String(size)] = Array.from(timed.last.subarray(0, 4096))
    nextByRun[String(size)] = argmax(timed.last)
  }
  await buffers?.close()
  await session.release()
  return {
    load_s: loadS,
    logits_single: Array.from(single.logits.subarray(0, 4096)),
    logits_chunked: Array.from(last.subarray(0, 4096)),
    prompt_ms_single: promptMsSingle,
    prompt_ms_chunked: promptMsChunked,
    decode_ms: decodeMs.slice(2),
    tokens,
    batch_decode_ms: batchMs.slice(2),
    ...(longMs ? { long_ms: longMs, logits_long: Array.from(logitsLong!.subarray(0, 4096)), logits_long_by_run: byRun, next_token_long_by_run: nextByRun } : {}),
    ...(longDecodeMs ? { long_decode_ms: longDecodeMs.slice(2) } : {}),
  }
}
