// The WebGPU exactness check on whatever GPU this machine has (scripts/gpu-check.sh
// runs it on a bare GPU machine; the tests run the same scenarios on lavapipe):
// stories260k, converted here by chatd's converter from test/fixtures/stories260k
// into bench-out/exactness/, greedy on the CPU provider and on WebGPU, every reply
// compared token for token (scripts/bench/exactness.ts): an fp32 and an int4
// (float compute) concat graph, whose cache stays in GPU memory (one request, three
// together, one joining mid-decode, a conversation with the prefix cache and the
// next turn computed ahead), the fp32 append graph (the cache on the host), and the
// form for GPU hosts (gqa-masked) on a small random model, conversation included,
// without and with its capture step (ONNX_WEBGPU_CAPTURE: a request alone replays its step;
// with ONNX_WEBGPU_CAPTURE_ROWS=4, requests decoding together replay one step);
// and stories260k's public goldens replayed on WebGPU (the fp32 concat and append
// graphs): the reference implementation's tokens, not only the CPU provider's.
// Prints one line per check and writes the report; exits 1 if any reply differs.
//
//   node scripts/webgpu-exactness.ts [--json FILE]
import fs from 'node:fs'
import path from 'node:path'
import type { CacheStyle, Int4Compute, WeightFormat } from '../src/convert/decoder-graph.ts'
import { convertCheckpoint, convertRandom } from '../src/convert/index.ts'
import { converterFingerprint } from '../src/convert/fingerprint.ts'
import type { ModelDtype } from '../src/engine/onnx/model-dir.ts'
import type { EngineSettings } from '../src/engine/onnx/scheduler/engine.ts'
import { batches, conversation, goldens, goldensOn, tokensOf } from './bench/exactness.ts'
import { scriptArgs } from './script-args.ts'

const ROOT = path.resolve(path.dirname(new URL(import.meta.url).pathname), '..')
const { values } = scriptArgs(import.meta.url, { options: { json: { type: 'string' } } })
const OUT = path.join(ROOT, 'bench-out', 'exactness')

/** A model built into bench-out/exactness/ by `build`, once per converter version. */
function built (name: string, build: (out: string) => void): string {
  const dir = path.join(OUT, `${name}-${converterFingerprint()}`)
  if (!fs.existsSync(path.join(dir, '.complete'))) {
    fs.rmSync(dir, { recursive: true, force: true })
    build(dir)
    fs.writeFileSync(path.join(dir, '.complete'), '')
  }
  return dir
}

/** stories260k converted with these options. */
function stories (weights: WeightFormat, cache: CacheStyle, int4Compute?: Int4Compute): string {
  return built(`stories260k-${weights}-${cache}${int4Compute ? `-${int4Compute}` : ''}`, out => {
    convertCheckpoint({ from: path.join(ROOT, 'test/fixtures/stories260k'), out, weights, cache, int4Compute })
  })
}

/**
 * The form for GPU hosts (gqa-masked, int4 in float) on a tiny random Qwen2 whose heads are 16
 * wide (GroupQueryAttention takes no narrower; stories260k's are 8): the tests' model.
 */
function gpuForm (): string {
  return built('random-qwen2-hd16-gqa-masked-int4-step', out => {
    convertRandom({ configPath: path.join(ROOT, 'test/fixtures/tiny-qwen2-hd16.config.json'), out, weights: 'int4', seed: 7, cache: 'concat', attention: 'gqa-masked', int4Compute: 'float', captureStep: true })
  })
}

/** `settings`: the WebGPU engine's (the CPU's reference runs without them). */
const checks: Array<{ name: string; dir: string; dtype: ModelDtype; conversation?: boolean; settings?: Partial<EngineSettings> }> = [
  { name: 'fp32 concat graph (cache in GPU memory)', dir: stories('fp32', 'concat'), dtype: 'fp32', conversation: true },
  { name: 'int4 concat graph, float compute (cache in GPU memory)', dir: stories('int4', 'concat', 'float'), dtype: 'q4' },
  { name: 'fp32 append graph (cache on the host)', dir: stories('fp32', 'append'), dtype: 'fp32' },
  { name: 'int4 gqa-masked graph, float compute (the GPU form; random weights)', dir: gpuForm(), dtype: 'q4', conversation: true },
  // The byte-level tokenizer's turns are ~100 positions: a conversation fits 1,024.
  { name: 'the GPU form with its capture step (ONNX_WEBGPU_CAPTURE=1024)', dir: gpuForm(), dtype: 'q4', conversation: true, settings: { webgpuCapture: 1024 } },
  // Requests decoding together on one replay, rows of different lengths (three together fit 4; a join).
  { name: 'the capture step with rows (ONNX_WEBGPU_CAPTURE=1024, ONNX_WEBGPU_CAPTURE_ROWS=4)', dir: gpuForm(), dtype: 'q4', settings: { webgpuCapture: 1024, webgpuCaptureRows: 4 } },
]

const results: Array<Record<string, unknown>> = []
let failed = false
for (const check of checks) {
  const started = performance.now()
  const cpu = await batches(check.dir, check.dtype, 'cpu')
  const gpu = await batches(check.dir, check.dtype, 'webgpu', check.settings)
  // Tokens decide; cached counts may differ where the devices schedule differently (tokensOf).
  const same = JSON.stringify(tokensOf(gpu.replies)) === JSON.stringify(tokensOf(cpu.replies))
  const result: Record<string, unknown> = { check: check.name, device: gpu.device, cache_on_device: gpu.cacheOnDevice, cache_in_place: gpu.cacheInPlace, same_tokens: same, same_cached: JSON.stringify(gpu.replies) === JSON.stringify(cpu.replies), seconds: Math.round((performance.now() - started) / 100) / 10 }
  if (!same) result.replies = { cpu: cpu.replies, webgpu: gpu.replies }
  if (gpu.capturedSteps !== undefined) result.captured_steps = gpu.capturedSteps
  if (check.conversation) {
    const expected = await conversation(check.dir, check.dtype, 'cpu')
    const { capturedSteps, ...got } = await conversation(check.dir, check.dtype, 'webgpu', check.settings)
    result.conversation_same = JSON.stringify(got) === JSON.stringify(expected)
    if (capturedSteps !== undefined) result.conversation_captured_steps = capturedSteps
    result.conversation_cached = got.replies.map(r => r.cached)
    if (!result.conversation_same) result.conversation = { cpu: expected, webgpu: got }
  }
  failed ||= !same || result.conversation_same === false || gpu.device !== 'webgpu'
  results.push(result)
  console.log(`${same && result.conversation_same !== false ? 'same' : 'DIFFERENT'}: ${check.name} on ${gpu.device}${check.conversation ? `, conversation ${result.conversation_same ? 'same' : 'DIFFERENT'}` : ''} (${result.seconds} s)`)
}
for (const cache of ['concat', 'append'] as const) {
  const started = performance.now()
  const gpu = await goldensOn(stories('fp32', cache), 'webgpu')
  const same = gpu.same.every(Boolean) && gpu.device === 'webgpu'
  const name = `public goldens, fp32 ${cache} graph`
  results.push({ check: name, device: gpu.device, cache_on_device: gpu.cacheOnDevice, same_tokens: same, goldens: goldens.length, seconds: Math.round((performance.now() - started) / 100) / 10 })
  failed ||= !same
  console.log(`${same ? 'same' : 'DIFFERENT'}: ${name} on ${gpu.device} (${gpu.same.filter(Boolean).length} of ${goldens.length})`)
}
const report = { date: new Date().toISOString(), same: !failed, checks: results }
if (values.json) fs.writeFileSync(values.json, JSON.stringify(report, null, 2) + '\n')
process.exitCode = failed ? 1 : 0
