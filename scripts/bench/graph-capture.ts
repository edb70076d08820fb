// The WebGPU provider's graph capture, measured from Node: the one way found to take
// the host's dispatch of every kernel out of a decode step (docs/performance.md, "On a
// GPU: WebGPU"). onnxruntime-node 1.30 cannot turn capture on
// (scripts/graph-capture-check.ts); onnxruntime-web 1.30 can (its WebGPU build is the
// same C++ provider compiled to WebAssembly), and runs in Node over Dawn's Node binding
// (npm `webgpu`; onnxruntime-node carries a Dawn build of its own).
//
// What it does, for one model shape (seeded random int4 weights, chatd's converter):
//   - the reference: chatd's GPU form (gqa-masked) on onnxruntime-node's CPU provider,
//     a prompt and `--gen` greedy tokens (for each row, alone);
//   - chatd's engine's step today, for comparison: the GPU form on onnxruntime-node's
//     WebGPU provider with its cache in place, the logits read back every run;
//   - on onnxruntime-web's WebGPU provider (each variant in a child process: one device
//     a process), the prompt on the GPU form with the cache in place (one GPU buffer per
//     layer's keys and values, `--max-len` positions long, given as past and present),
//     then every decode step on the converter's static decode step
//     (`staticDecode`: the same shapes every run, the mask as long as the cache
//     buffer), its inputs and outputs in fixed GPU buffers written and read from
//     JavaScript, with graph capture off and on;
//   - the greedy tokens of each against the CPU's, the first step's logits' largest
//     difference, and the decode step's time (the median; with capture, the steps after
//     the one that records the graph).
// It is a measurement for deciding whether chatd's WebGPU device should run on
// onnxruntime-web; chatd's engine does not use it. scripts/gpu-check.sh runs it as its
// `capture` step.
//
// The models are the benchmark's (bench-model.ts: the 1.5B shape unless --model-config names
// another; built once into bench-out/models), or, with --work DIR, built into DIR.
//
// --rows N decodes N rows together, each on a prompt of its own, in one buffer per layer's
// keys and values [rows, kv heads, max-len, head_dim]: each row's seqlens_k from its own mask
// row, so rows need no padding (prompts of one length, for the prompt's one run).
//
// --variants picks which of the three run (node, plain, capture).
//
//   node scripts/bench/graph-capture.ts [--model-config FILE] [--work DIR] [--rows 1]
//     [--prompt 24] [--gen 48] [--max-len 512] [--variants node,plain,capture] [--json FILE]
import { execFileSync } from 'node:child_process'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import { parseArgs } from 'node:util'
import ort from 'onnxruntime-node'
import { convertRandom } from '../../src/convert/index.ts'
import { GpuBuffers } from '../../src/engine/onnx/device/gpu-buffers.ts'
import { argmax } from '../../src/engine/onnx/sampling/sampler.ts'
import { BENCH_MODEL_CONFIG, benchModelDir } from '../bench-model.ts'
import { median } from './rounds.ts'

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..')
const ONNX_FILE = 'onnx/model_q4.onnx'

interface ModelShape { layers: number; kvHeads: number; headDim: number; vocab: number }

/** The step's runtimes: chatd's today (onnxruntime-node, the cache in place), and onnxruntime-web without and with capture. */
type VariantKind = 'node' | 'plain' | 'capture'
const VARIANT_NAMES: Record<VariantKind, string> = {
  node: 'onnxruntime-node, cache in place (chatd\'s engine today)',
  plain: 'onnxruntime-web, no capture',
  capture: 'onnxruntime-web, graph capture',
}

interface VariantResult {
  name: string
  kind: VariantKind
  capture: boolean
  /** Each row's greedy tokens: the prompt's next token, then each decode step's. */
  tokens: number[][]
  tokens_equal_cpu: boolean
  first_logits_max_diff_vs_cpu: number
  prompt_ms: number
  /** The median decode step (every row one token): inputs written, the run, the logits read back and argmax. */
  step_ms_median: number
  /** Rows over the median step, in tokens a second. */
  tokens_per_s: number
  step_ms_min: number
  /** The median time from the step's start to its run's return: the host's part (the GPU may still be working). */
  run_ms_median: number
  /** The first decode step (with capture: the run that records the graph). */
  first_step_ms: number
  session_load_s: number
  adapter: string
  /** onnxruntime-web: the WebGPU features its device was given (subgroups, shader-f16: which kernels it may pick). */
  device_features?: string[]
}

export interface GraphCaptureReport {
  shape: string
  /** Rows decoding together, each on a prompt of its own (of one length). */
  rows: number
  prompt_tokens: number
  gen: number
  max_len: number
  onnxruntime_web: string
  cpu_tokens: number[][]
  variants: VariantResult[]
  /** No capture's median step over capture's. */
  capture_speedup: number | null
  /** onnxruntime-node's median step (chatd's engine today) over capture's. */
  capture_speedup_vs_node: number | null
}

type ChildResult = Omit<VariantResult, 'name' | 'kind' | 'tokens_equal_cpu' | 'first_logits_max_diff_vs_cpu' | 'tokens_per_s'> & { first_logits: number[][] }

/** Row `row`'s prompt: `n` ids of its own. */
function promptIds (n: number, vocab: number, row: number): number[] {
  return Array.from({ length: n }, (_, i) => (i * 7919 + 13 + row * 104729) % vocab)
}

function readShape (dir: string): ModelShape {
  const cfg = JSON.parse(fs.readFileSync(path.join(dir, 'config.json'), 'utf8')) as Record<string, number>
  return { layers: cfg.num_hidden_layers, kvHeads: cfg.num_key_value_heads, headDim: cfg.head_dim ?? cfg.hidden_size / cfg.num_attention_heads, vocab: cfg.vocab_size }
}

/** The GPU form and its static decode step, from the same seeded weights. */
function buildModels (opts: { config: string; work?: string }): { form: string; decode: string } {
  const work = opts.work
  if (work === undefined) {
    return { form: benchModelDir(32, 'chatd', { gpu: true, config: opts.config }), decode: benchModelDir(32, 'chatd', { gpu: true, config: opts.config, gpuAttention: 'gqa-static-decode' }) }
  }
  const build = (name: string, staticDecode: boolean): string => {
    const out = path.join(work, name)
    if (!fs.existsSync(path.join(out, ONNX_FILE))) {
      convertRandom({ configPath: opts.config, out, weights: 'int4', seed: 1, cache: 'concat', int4Compute: 'float', attention: 'gqa-masked', staticDecode })
    }
    return out
  }
  return { form: build('gpu-form', false), decode: build('static-decode', true) }
}

const int64 = (values: number[], dims: number[]): ort.Tensor => new ort.Tensor('int64', BigInt64Array.from(values, BigInt), dims)

/** Row `row`'s logits of [rows, 1, vocab]. */
const rowOf = (logits: Float32Array, row: number, vocab: number): Float32Array => logits.subarray(row * vocab, (row + 1) * vocab)

/** The reference: the GPU form on onnxruntime-node's CPU provider, each row alone, the cache concatenated run by run. */
async function cpuReference (dir: string, shape: ModelShape, prompts: number[][], gen: number): Promise<{ tokens: number[][]; firstLogits: Float32Array[] }> {
  const session = await ort.InferenceSession.create(path.join(dir, ONNX_FILE), { executionProviders: ['cpu'], intraOpNumThreads: os.availableParallelism() })
  const tokens: number[][] = []
  const firstLogits: Float32Array[] = []
  for (const prompt of prompts) {
    let past: Record<string, ort.Tensor> = {}
    for (let i = 0; i < shape.layers; i++) {
      for (const kv of ['key', 'value']) past[`past_key_values.${i}.${kv}`] = new ort.Tensor('float32', new Float32Array(0), [1, shape.kvHeads, 0, shape.headDim])
    }
    const row: number[] = []
    let ids = prompt
    let length = 0
    for (let step = 0; step < gen; step++) {
      const total = length + ids.length
      const out = await session.run({
        input_ids: int64(ids, [1, ids.length]),
        attention_mask: int64(new Array<number>(total).fill(1), [1, total]),
        position_ids: int64(ids.map((_, j) => length + j), [1, ids.length]),
        num_logits_to_keep: new ort.Tensor('int64', BigInt64Array.of(1n), []),
        ...past,
      })
      const logits = out.logits.data as Float32Array
      if (step === 1) firstLogits.push(logits.slice())
      const next = argmax(logits)
      row.push(next)
      past = {}
      for (let i = 0; i < shape.layers; i++) {
        for (const kv of ['key', 'value']) past[`past_key_values.${i}.${kv}`] = out[`present.${i}.${kv}`]
      }
      length = total
      ids = [next]
    }
    // The prompt's next token, then each decode step's.
    tokens.push(row)
  }
  await session.release()
  return { tokens, firstLogits }
}

interface RunArgs { form: string; decode: string; prompts: number[][]; gen: number; maxLen: number; shape: ModelShape }

/** Times of a run of steps: the median and fastest after the first `skip`, and the first. */
function stepTimes (steps: number[], skip: number): Pick<ChildResult, 'step_ms_median' | 'step_ms_min' | 'first_step_ms'> {
  const timed = steps.slice(skip)
  return { step_ms_median: median(timed), step_ms_min: Math.min(...timed), first_step_ms: steps[0] }
}

/**
 * chatd's engine's step today: the GPU form on onnxruntime-node's WebGPU provider with its cache in
 * place (one GPU buffer per layer's keys and values, `maxLen` positions a row, made as the engine
 * makes them), the rows' logits read back every run.
 */
async function runNode (args: RunArgs): Promise<ChildResult> {
  const { shape, maxLen, prompts, gen } = args
  const rows = prompts.length
  const started = performance.now()
  const session = await ort.InferenceSession.create(path.join(args.form, ONNX_FILE), { executionProviders: ['webgpu'] })
  const buffers = await GpuBuffers.open()
  const cache: Record<string, ort.Tensor> = {}
  for (let i = 0; i < shape.layers; i++) {
    for (const kv of ['key', 'value']) cache[`past_key_values.${i}.${kv}`] = await buffers.padded(new ort.Tensor('float32', new Float32Array(0), [rows, shape.kvHeads, 0, shape.headDim]), maxLen)
  }
  const sessionLoad = (performance.now() - started) / 1000
  const fetches = { logits: null, cache_delta: null, ...Object.fromEntries(Object.entries(cache).map(([name, t]) => [name.replace('past_key_values', 'present'), t])) }
  /** Every row's `ids` (rows of one length) after `past` positions; every row's logits. */
  const run = async (ids: number[][], past: number): Promise<Float32Array> => {
    const seq = ids[0].length
    const out = await session.run({
      input_ids: int64(ids.flat(), [rows, seq]),
      attention_mask: int64(new Array<number>(rows * (past + seq)).fill(1), [rows, past + seq]),
      position_ids: int64(ids.flatMap(row => row.map((_, j) => past + j)), [rows, seq]),
      num_logits_to_keep: new ort.Tensor('int64', BigInt64Array.of(1n), []),
      ...cache,
    }, fetches)
    return out.logits.data as Float32Array
  }
  let t0 = performance.now()
  const promptLogits = await run(prompts, 0)
  const promptMs = performance.now() - t0
  let next = prompts.map((_, r) => argmax(rowOf(promptLogits, r, shape.vocab)))
  const tokens = next.map(t => [t])
  const steps: number[] = []
  let firstLogits: number[][] = []
  for (let step = 0; step < gen; step++) {
    t0 = performance.now()
    const logits = await run(next.map(t => [t]), prompts[0].length + step)
    next = next.map((_, r) => argmax(rowOf(logits, r, shape.vocab)))
    steps.push(performance.now() - t0)
    if (step === 0) firstLogits = next.map((_, r) => Array.from(rowOf(logits, r, shape.vocab)))
    next.forEach((t, r) => tokens[r].push(t))
  }
  for (const row of tokens) row.pop()
  await buffers.close()
  await session.release()
  const times = stepTimes(steps, 1)
  return { capture: false, tokens, prompt_ms: promptMs, ...times, run_ms_median: times.step_ms_median, session_load_s: sessionLoad, adapter: 'onnxruntime-node', first_logits: firstLogits }
}

/**
 * Keeps onnxruntime-web's registration of each buffer alive after the run `run`.
 * With graph capture, onnxruntime-web 1.30 binds a session's inputs and outputs on its first run
 * only, under the numbers it registered the buffers with for that run, and drops a buffer's number
 * when its run ends; the next run then finds its outputs under numbers it no longer knows
 * ("Cannot set properties of undefined"), and the captured graph keeps the first run's. Its
 * registration lives on the buffer as a [number, count] pair under a symbol of its own, present
 * only while a run holds the buffer: caught there during the first run and given a count that
 * never reaches zero, the number stays for the session's life.
 */
async function pinRegistrations (buffers: GPUBuffer[], run: Promise<unknown>): Promise<void> {
  const pinned = new Set<GPUBuffer>()
  const state = { done: false }
  void run.finally(() => { state.done = true }).catch(() => {})
  const pin = (): void => {
    for (const buffer of buffers) {
      if (pinned.has(buffer)) continue
      for (const sym of Object.getOwnPropertySymbols(buffer)) {
        const entry = (buffer as unknown as Record<symbol, unknown>)[sym]
        if (sym.description === 'gpuBufferMetadata' && Array.isArray(entry)) {
          entry[1] = Number.NaN
          pinned.add(buffer)
        }
      }
    }
  }
  // Looked for between the run's own microtasks first (a fast run may not yield to the event loop
  // before it ends), then at each turn of the event loop (where it waits on the GPU).
  for (let turn = 0; !state.done && pinned.size < buffers.length; turn++) {
    pin()
    await (turn < 1000 ? Promise.resolve() : new Promise(resolve => setImmediate(resolve)))
  }
  if (pinned.size < buffers.length) throw new Error(`onnxruntime-web's registration of ${buffers.length - pinned.size} of the step's ${buffers.length} buffers was not caught during its first run`)
}

/** One variant in this process: onnxruntime-web over Dawn's Node binding. */
async function runWeb (args: RunArgs & { capture: boolean }): Promise<ChildResult> {
  const { create, globals } = await import('webgpu')
  Object.assign(globalThis, globals)
  Object.defineProperty(globalThis.navigator, 'gpu', { value: create([]), configurable: true })
  const web = await import('onnxruntime-web/webgpu')
  web.env.wasm.numThreads = 1
  web.env.logLevel = (process.env.ORT_WEB_LOG ?? 'warning') as 'warning'
  type WebSession = Awaited<ReturnType<typeof web.InferenceSession.create>>
  const { shape, maxLen, prompts, gen } = args
  const rows = prompts.length
  const promptLength = prompts[0].length
  // The decode step's dimensions, fixed: onnxruntime then folds the graph's shape arithmetic into
  // constants, and capture takes only graphs whose every node runs on the GPU.
  const fixedDims = { batch_size: rows, sequence_length: 1, total_sequence_length: maxLen, past_sequence_length: maxLen }
  const load = async (dir: string, capture: boolean, freeDimensionOverrides?: Record<string, number>): Promise<WebSession> => {
    const file = path.join(dir, ONNX_FILE)
    const data = `${path.basename(file)}_data`
    return await web.InferenceSession.create(new Uint8Array(fs.readFileSync(file)), {
      // As an object: onnxruntime-web hands enableGraphCapture to the provider only then.
      executionProviders: [{ name: 'webgpu' }],
      enableGraphCapture: capture,
      ...(freeDimensionOverrides ? { freeDimensionOverrides } : {}),
      ...(process.env.ORT_WEB_LOG === 'verbose' ? { logSeverityLevel: 0 as const, logVerbosityLevel: 1 } : {}),
      externalData: [{ path: data, data: new Uint8Array(fs.readFileSync(path.join(path.dirname(file), data))) }],
    })
  }
  const started = performance.now()
  const promptSession = await load(args.form, false)
  const decodeSession = await load(args.decode, args.capture, fixedDims)
  const sessionLoad = (performance.now() - started) / 1000
  const device = await web.env.webgpu.device
  const info = (device as unknown as { adapterInfo?: { vendor?: string; architecture?: string; device?: string; description?: string } }).adapterInfo
  const adapter = [info?.vendor, info?.architecture, info?.device, info?.description].filter(Boolean).join(' ')
  const STORAGE = GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_SRC | GPUBufferUsage.COPY_DST
  const buffer = (bytes: number): GPUBuffer => device.createBuffer({ size: Math.max(16, Math.ceil(bytes / 16) * 16), usage: STORAGE })
  const gpuTensor = (buf: GPUBuffer, dataType: 'float32' | 'int64', dims: number[]) => web.Tensor.fromGpuBuffer(buf, { dataType, dims })

  // The cache: one buffer per layer's keys and values, maxLen positions a row, past and present of every run.
  const cacheDims = [rows, shape.kvHeads, maxLen, shape.headDim]
  const cache: Record<string, ReturnType<typeof gpuTensor>> = {}
  const present: Record<string, ReturnType<typeof gpuTensor>> = {}
  for (let i = 0; i < shape.layers; i++) {
    for (const kv of ['key', 'value']) {
      const t = gpuTensor(buffer(4 * rows * shape.kvHeads * maxLen * shape.headDim), 'float32', cacheDims)
      cache[`past_key_values.${i}.${kv}`] = t
      present[`present.${i}.${kv}`] = t
    }
  }
  const cpuInt64 = (values: number[], dims: number[]) => new web.Tensor('int64', BigInt64Array.from(values, BigInt), dims)

  // The prompts, on the GPU form with the cache in place.
  let t0 = performance.now()
  const promptOut = await promptSession.run({
    input_ids: cpuInt64(prompts.flat(), [rows, promptLength]),
    attention_mask: cpuInt64(new Array<number>(rows * promptLength).fill(1), [rows, promptLength]),
    position_ids: cpuInt64(prompts.flatMap(p => p.map((_, j) => j)), [rows, promptLength]),
    num_logits_to_keep: new web.Tensor('int64', BigInt64Array.of(1n), []),
    ...cache,
  }, { logits: null, cache_delta: null, ...present } as never)
  const promptLogits = await promptOut.logits.getData() as Float32Array
  let next = prompts.map((_, r) => argmax(rowOf(promptLogits, r, shape.vocab)))
  const promptMs = performance.now() - t0

  // The decode step's inputs and outputs, fixed GPU buffers written from here.
  const ids = buffer(8 * rows)
  const positions = buffer(8 * rows)
  const mask = buffer(8 * rows * maxLen)
  const logits = buffer(4 * rows * shape.vocab)
  const readback = device.createBuffer({ size: 4 * rows * shape.vocab, usage: GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST })
  const ones = new BigInt64Array(rows * maxLen)
  for (let r = 0; r < rows; r++) ones.fill(1n, r * maxLen, r * maxLen + promptLength + 1)
  device.queue.writeBuffer(mask, 0, ones)
  const feeds = {
    input_ids: gpuTensor(ids, 'int64', [rows, 1]),
    attention_mask: gpuTensor(mask, 'int64', [rows, maxLen]),
    position_ids: gpuTensor(positions, 'int64', [rows, 1]),
    ...cache,
  }
  const fetches = { logits: gpuTensor(logits, 'float32', [rows, 1, shape.vocab]), ...present }
  const fixedBuffers = [ids, positions, mask, logits, ...Object.values(cache).map(t => t.gpuBuffer as GPUBuffer)]
  const tokens = next.map(t => [t])
  const steps: number[] = []
  const runs: number[] = []
  let firstLogits: number[][] = []
  const one = BigInt64Array.of(1n)
  for (let step = 0; step < gen; step++) {
    const position = promptLength + step
    if (position >= maxLen) throw new Error(`--max-len ${maxLen} is too short for ${promptLength} + ${gen} tokens`)
    t0 = performance.now()
    device.queue.writeBuffer(ids, 0, BigInt64Array.from(next, BigInt))
    device.queue.writeBuffer(positions, 0, BigInt64Array.from(next, () => BigInt(position)))
    if (step > 0) for (let r = 0; r < rows; r++) device.queue.writeBuffer(mask, 8 * (r * maxLen + position), one)
    const run = decodeSession.run(feeds, fetches as never)
    if (step === 0) await pinRegistrations(fixedBuffers, run)
    await run
    runs.push(performance.now() - t0)
    const encoder = device.createCommandEncoder()
    encoder.copyBufferToBuffer(logits, 0, readback, 0, 4 * rows * shape.vocab)
    device.queue.submit([encoder.finish()])
    await readback.mapAsync(GPUMapMode.READ)
    const all = new Float32Array(readback.getMappedRange().slice(0))
    readback.unmap()
    next = next.map((_, r) => argmax(rowOf(all, r, shape.vocab)))
    steps.push(performance.now() - t0)
    if (step === 0) firstLogits = next.map((_, r) => Array.from(rowOf(all, r, shape.vocab)))
    next.forEach((t, r) => tokens[r].push(t))
  }
  for (const row of tokens) row.pop() // the last step's token has no step of its own in the CPU's list
  await promptSession.release()
  await decodeSession.release()
  // With capture the first run records the graph (and may run a few times before): time the rest.
  const skip = args.capture ? 2 : 1
  return {
    capture: args.capture,
    tokens,
    prompt_ms: promptMs,
    ...stepTimes(steps, skip),
    run_ms_median: median(runs.slice(skip)),
    session_load_s: sessionLoad,
    adapter,
    device_features: [...(device.features as unknown as Set<string>)].sort(),
    first_logits: firstLogits,
  }
}

async function main (): Promise<void> {
  const { values } = parseArgs({
    options: {
      'model-config': { type: 'string' },
      prompt: { type: 'string', default: '24' },
      gen: { type: 'string', default: '48' },
      'max-len': { type: 'string', default: '512' },
      rows: { type: 'string', default: '1' },
      variants: { type: 'string', default: 'node,plain,capture' },
      json: { type: 'string' },
      child: { type: 'string' },
      work: { type: 'string' },
      result: { type: 'string' },
    },
  })
  const kinds = values.variants.split(',') as VariantKind[]
  const unknown = kinds.filter(k => !(k in VARIANT_NAMES))
  if (unknown.length > 0) {
    console.error(`graph-capture: --variants takes ${Object.keys(VARIANT_NAMES).join(', ')}, comma-separated; not ${unknown.join(', ')}`)
    process.exit(2)
  }
  const config = path.resolve(values['model-config'] ?? BENCH_MODEL_CONFIG)
  // Where the children leave their results (and, with --work, the models are built).
  const work = values.work ?? path.join(ROOT, 'bench-out', 'graph-capture')
  const gen = Number(values.gen)
  const maxLen = Number(values['max-len'])
  const models = buildModels({ config, work: values.work })
  const shape = readShape(models.form)
  const rows = Number(values.rows)
  const prompts = Array.from({ length: rows }, (_, r) => promptIds(Number(values.prompt), shape.vocab, r))
  if (values.child !== undefined) {
    const args = { ...models, prompts, gen, maxLen, shape }
    const result = values.child === 'node' ? await runNode(args) : await runWeb({ ...args, capture: values.child === 'capture' })
    fs.writeFileSync(values.result as string, JSON.stringify(result))
    process.exit(0)
  }
  fs.mkdirSync(work, { recursive: true })
  const cpu = await cpuReference(models.form, shape, prompts, gen)
  const variants: VariantResult[] = []
  for (const kind of kinds) {
    const name = VARIANT_NAMES[kind]
    const forward = process.argv.slice(2).filter((a, i, all) => a !== '--json' && all[i - 1] !== '--json')
    const resultFile = path.join(work, `result-${kind}.json`)
    fs.rmSync(resultFile, { force: true })
    try {
      execFileSync(process.execPath, [fileURLToPath(import.meta.url), ...forward, '--child', kind, '--result', resultFile], { stdio: ['ignore', 'inherit', 'inherit'] })
    } catch (err) {
      console.error(`${name}: failed (${(err as Error).message.split('\n')[0]})`)
      continue
    }
    const r = JSON.parse(fs.readFileSync(resultFile, 'utf8')) as ChildResult
    let diff = 0
    r.first_logits.forEach((row, i) => row.forEach((v, k) => { diff = Math.max(diff, Math.abs(v - cpu.firstLogits[i][k])) }))
    const { first_logits: _, ...rest } = r
    variants.push({ name, kind, ...rest, tokens_per_s: rows * 1000 / r.step_ms_median, tokens_equal_cpu: JSON.stringify(r.tokens) === JSON.stringify(cpu.tokens), first_logits_max_diff_vs_cpu: diff })
  }
  const node = variants.find(v => v.kind === 'node')
  const plain = variants.find(v => v.kind === 'plain')
  const captured = variants.find(v => v.kind === 'capture')
  const report: GraphCaptureReport = {
    shape: path.basename(config, '.config.json'),
    rows,
    prompt_tokens: prompts[0].length,
    gen,
    max_len: maxLen,
    onnxruntime_web: (JSON.parse(fs.readFileSync(path.join(ROOT, 'node_modules/onnxruntime-web/package.json'), 'utf8')) as { version: string }).version,
    cpu_tokens: cpu.tokens,
    variants,
    capture_speedup: plain && captured ? plain.step_ms_median / captured.step_ms_median : null,
    capture_speedup_vs_node: node && captured ? node.step_ms_median / captured.step_ms_median : null,
  }
  for (const v of variants) {
    console.log(`${v.name}: step ${v.step_ms_median.toFixed(2)} ms, ${v.tokens_per_s.toFixed(1)} tok/s (min ${v.step_ms_min.toFixed(2)}, run ${v.run_ms_median.toFixed(2)}, first ${v.first_step_ms.toFixed(1)}), prompt ${v.prompt_ms.toFixed(1)} ms, tokens ${v.tokens_equal_cpu ? '=' : '!='} CPU's, first logits within ${v.first_logits_max_diff_vs_cpu.toExponential(1)} (${v.adapter})`)
  }
  if (report.capture_speedup !== null) console.log(`graph capture: ${report.capture_speedup.toFixed(2)}x the step without it`)
  if (report.capture_speedup_vs_node !== null) console.log(`graph capture: ${report.capture_speedup_vs_node.toFixed(2)}x onnxruntime-node's step (chatd's engine today)`)
  if (values.json) fs.writeFileSync(values.json, `${JSON.stringify(report, null, 2)}\n`)
  // A variant that failed, or gave other tokens than the CPU, fails the run.
  if (variants.length < kinds.length || variants.some(v => !v.tokens_equal_cpu)) process.exitCode = 1
}

await main()
