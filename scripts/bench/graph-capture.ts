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
//   - on onnxruntime's own WebGPU provider (the library onnxruntime-node loads), reached
//     through its C API with koffi (ort-capi.ts, native-decode.ts): the same prompt and
//     static step, capture on, every input and output a GPU tensor bound once (IoBinding);
//   - the greedy tokens of each against the CPU's, the first step's logits' largest
//     difference, and the decode step's time (the median; with capture, the steps after
//     the one that records the graph).
// It is a measurement for deciding how chatd's WebGPU device should capture its step;
// chatd's engine does not use it. The runs are decode-runs.ts's (the CPU
// reference, onnxruntime-node) and web-decode.ts's (onnxruntime-web); this file builds the
// models, runs each variant in a child process and writes the report. scripts/gpu-check.sh runs it as its
// `capture` step.
//
// The models are the benchmark's (bench-model.ts: the 1.5B shape unless --model-config names
// another; built once into bench-out/models), or, with --work DIR, built into DIR.
//
// --rows N decodes N rows together, each on a prompt of its own, in one buffer per layer's
// keys and values [rows, kv heads, max-len, head_dim]: each row's seqlens_k from its own mask
// row, so rows need no padding (prompts of one length, for the prompt's one run).
//
// --variants picks which run (node, plain, capture, native); native needs no onnxruntime-web.
//
// --profile-steps N: after its timed steps, the node variant runs up to N more (what room the
// cache has left) on a second session with onnxruntime's profiler on, and reports where a step's
// time went: each node's host time by operator (the dispatches' recording) and each GPU program's
// duration (kernel-profile.ts): what of the engine's step is the host's and what the GPU's.
//
//   node scripts/bench/graph-capture.ts [--model-config FILE] [--work DIR] [--rows 1]
//     [--prompt 24] [--gen 48] [--max-len 512] [--variants node,plain,capture[,native]] [--profile-steps 0] [--json FILE]
import { execFileSync } from 'node:child_process'
import fs from 'node:fs'
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import { convertRandom } from '../../src/convert/index.ts'
import { BENCH_MODEL_CONFIG, benchModelDir } from '../bench-model.ts'
import { formatKernelProfile } from './kernel-profile.ts'
import { readModelDir } from '../../src/engine/onnx/model-dir.ts'
import { cpuReference, runNode, type StepRun } from './decode-runs.ts'
import { runNative } from './native-decode.ts'
import { runWeb } from './web-decode.ts'
import { scriptArgs } from '../script-args.ts'

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..')
/** The int4 graph's file in a model directory (dtype q4). */
const ONNX_FILE = 'onnx/model_q4.onnx'

/** The step's runtimes: chatd's today (onnxruntime-node, the cache in place), onnxruntime-web without and with capture, and onnxruntime's C API with capture. */
type VariantKind = 'node' | 'plain' | 'capture' | 'native'
const VARIANT_NAMES: Record<VariantKind, string> = {
  node: 'onnxruntime-node, cache in place (chatd\'s engine today)',
  plain: 'onnxruntime-web, no capture',
  capture: 'onnxruntime-web, graph capture',
  native: 'onnxruntime native (C API), graph capture',
}

/** A variant's run, compared with the CPU's. */
interface VariantResult extends Omit<StepRun, 'first_logits' | 'first_cache_delta'> {
  name: string
  kind: VariantKind
  tokens_equal_cpu: boolean
  first_logits_max_diff_vs_cpu: number
  /** Where the step returns its new keys and values to the host (native): the first step's, against the CPU's. */
  first_cache_delta_max_diff_vs_cpu?: number
  /** Rows over the median step, in tokens a second. */
  tokens_per_s: number
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
  /** onnxruntime-node's median step over the native provider's captured one. */
  native_speedup_vs_node: number | null
}

/** Row `row`'s prompt: `n` ids of its own. */
function promptIds (n: number, vocab: number, row: number): number[] {
  return Array.from({ length: n }, (_, i) => (i * 7919 + 13 + row * 104729) % vocab)
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

async function main (): Promise<void> {
  const { values } = scriptArgs(import.meta.url, {
    options: {
      'model-config': { type: 'string' },
      prompt: { type: 'string', default: '24' },
      gen: { type: 'string', default: '48' },
      'max-len': { type: 'string', default: '512' },
      rows: { type: 'string', default: '1' },
      'profile-steps': { type: 'string', default: '0' },
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
  const dirs = buildModels({ config, work: values.work })
  const form = readModelDir(dirs.form, 'q4')
  const rows = Number(values.rows)
  const prompts = Array.from({ length: rows }, (_, r) => promptIds(Number(values.prompt), form.vocabSize, r))
  if (values.child !== undefined) {
    const args = { form, decode: readModelDir(dirs.decode, 'q4'), prompts, gen, maxLen, profileSteps: Number(values['profile-steps']), profileDir: work }
    const result = values.child === 'node'
      ? await runNode(args)
      : values.child === 'native' ? await runNative(args) : await runWeb({ ...args, capture: values.child === 'capture' })
    fs.writeFileSync(values.result as string, JSON.stringify(result))
    process.exit(0)
  }
  fs.mkdirSync(work, { recursive: true })
  const cpu = await cpuReference(form, prompts, gen)
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
    const r = JSON.parse(fs.readFileSync(resultFile, 'utf8')) as StepRun
    let diff = 0
    r.first_logits.forEach((row, i) => row.forEach((v, k) => { diff = Math.max(diff, Math.abs(v - cpu.firstLogits[i][k])) }))
    let deltaDiff: number | undefined
    r.first_cache_delta?.forEach((row, i) => row.forEach((v, k) => { deltaDiff = Math.max(deltaDiff ?? 0, Math.abs(v - cpu.firstDeltas[i][k])) }))
    const { first_logits: _, first_cache_delta: __, ...rest } = r
    variants.push({ name, kind, ...rest, tokens_per_s: rows * 1000 / r.step_ms_median, tokens_equal_cpu: JSON.stringify(r.tokens) === JSON.stringify(cpu.tokens), first_logits_max_diff_vs_cpu: diff, ...(deltaDiff === undefined ? {} : { first_cache_delta_max_diff_vs_cpu: deltaDiff }) })
  }
  const node = variants.find(v => v.kind === 'node')
  const plain = variants.find(v => v.kind === 'plain')
  const captured = variants.find(v => v.kind === 'capture')
  const native = variants.find(v => v.kind === 'native')
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
    native_speedup_vs_node: node && native ? node.step_ms_median / native.step_ms_median : null,
  }
  for (const v of variants) {
    console.log(`${v.name}: step ${v.step_ms_median.toFixed(2)} ms, ${v.tokens_per_s.toFixed(1)} tok/s (min ${v.step_ms_min.toFixed(2)}, run ${v.run_ms_median.toFixed(2)}, first ${v.first_step_ms.toFixed(1)}), prompt ${v.prompt_ms.toFixed(1)} ms, tokens ${v.tokens_equal_cpu ? '=' : '!='} CPU's, first logits within ${v.first_logits_max_diff_vs_cpu.toExponential(1)}${v.first_cache_delta_max_diff_vs_cpu === undefined ? '' : `, cache_delta within ${v.first_cache_delta_max_diff_vs_cpu.toExponential(1)}`} (${v.adapter})`)
    if (v.kernel_profile) console.log(formatKernelProfile(v.kernel_profile))
  }
  if (report.capture_speedup !== null) console.log(`graph capture: ${report.capture_speedup.toFixed(2)}x the step without it`)
  if (report.capture_speedup_vs_node !== null) console.log(`graph capture: ${report.capture_speedup_vs_node.toFixed(2)}x onnxruntime-node's step (chatd's engine today)`)
  if (report.native_speedup_vs_node !== null) console.log(`native graph capture: ${report.native_speedup_vs_node.toFixed(2)}x onnxruntime-node's step (chatd's engine today)`)
  if (values.json) fs.writeFileSync(values.json, `${JSON.stringify(report, null, 2)}\n`)
  // A variant that failed, or gave other tokens than the CPU, fails the run.
  if (variants.length < kinds.length || variants.some(v => !v.tokens_equal_cpu)) process.exitCode = 1
}

await main()
