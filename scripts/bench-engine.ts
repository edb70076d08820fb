// Engine-only benchmark: one stream on the raw decoder session (no worker, no
// HTTP): prefill tokens/s for a P-token prompt, then decode tokens/s for G
// greedy tokens. Builds (once, cached) an int4 random model of the
// DeepSeek-R1-Distill-Qwen-1.5B shape unless --model-dir is given.
//
//   node scripts/bench-engine.ts [--model-dir DIR --dtype q4] [--prompt 128] [--gen 128] [--threads N] [--runs 3] [--block-size 32|64|128]
//                                [--profile] [--no-huge-pages] [--no-prompt-graph]
//
// --profile records onnxruntime's per-node trace (bench-out/profile/) and
// prints where prompt runs and decode steps spend their time, by operator and
// by node family. Profiling slows every node a little: read its shares, and
// take tokens/s from a run without it. Prompts run on the model's int8 prompt
// graph where it has one (as the server does), unless --no-prompt-graph.
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { DecoderSession } from '../src/engine/onnx/device/decoder-session.ts'
import { cacheLayoutFor } from '../src/engine/onnx/cache/kv-cache.ts'
import { readModelDir, type ModelDtype } from '../src/engine/onnx/model-dir.ts'
import { argmax } from '../src/engine/onnx/sampling/sampler.ts'
import { benchModelDir } from './bench-model.ts'
import { ensureHugePages, hugePagesOn } from './huge-pages.ts'
import { formatProfile, readTrace, summarizeTrace } from './profile-trace.ts'
import { scriptArgs } from './script-args.ts'

const { values } = scriptArgs(import.meta.url, {
  options: {
    'model-dir': { type: 'string' },
    dtype: { type: 'string', default: 'q4' },
    prompt: { type: 'string', default: '128' },
    gen: { type: 'string', default: '128' },
    threads: { type: 'string', default: '0' },
    runs: { type: 'string', default: '3' },
    'block-size': { type: 'string', default: '32' },
    profile: { type: 'boolean', default: false },
    'huge-pages': { type: 'boolean', default: true },
    'prompt-graph': { type: 'boolean', default: true },
  },
  allowNegative: true,
})
ensureHugePages(values['huge-pages'])
const promptLen = Number(values.prompt)
const genLen = Number(values.gen)

const modelDir = values['model-dir'] ?? benchModelDir(Number(values['block-size']))

const model = readModelDir(modelDir, values.dtype as ModelDtype)
const profileDir = path.resolve('bench-out', 'profile')
if (values.profile) fs.mkdirSync(profileDir, { recursive: true })
// onnxruntime creates its trace file when the session loads: any file not here before is this run's.
const tracesBefore = new Set(values.profile ? fs.readdirSync(profileDir) : [])
const session = await DecoderSession.load(model, {
  device: 'cpu', threads: Number(values.threads), promptGraph: values['prompt-graph'], profilePrefix: values.profile ? path.join(profileDir, 'engine') : undefined,
})
// The engine's own cache handling (kv-cache.ts), whichever cache outputs the graph has.
const layout = cacheLayoutFor(session)
const prompt = Array.from({ length: promptLen }, (_, k) => 32 + (k * 7) % 90)

async function once (): Promise<{ prefill: number; decode: number }> {
  const t0 = performance.now()
  let out = await layout.run(layout.empty(), [prompt], 1, true)
  const t1 = performance.now()
  let next = argmax(out.logits.subarray(0, model.vocabSize))
  for (let i = 0; i < genLen; i++) {
    out = await layout.run(out.cache, [[next]], 1)
    next = argmax(out.logits.subarray(0, model.vocabSize))
  }
  const t2 = performance.now()
  layout.free(out.cache)
  return { prefill: promptLen / ((t1 - t0) / 1000), decode: genLen / ((t2 - t1) / 1000) }
}

await once() // warm-up: first runs allocate and prepack
const results = []
for (let r = 0; r < Number(values.runs); r++) results.push(await once())
const median = (xs: number[]) => xs.sort((a, b) => a - b)[Math.floor(xs.length / 2)]
const report = {
  model: modelDir,
  dtype: values.dtype,
  cache_outputs: session.cacheOutputs,
  prompt_graph: session.hasPromptGraph,
  threads: Number(values.threads) || os.availableParallelism(),
  huge_pages: hugePagesOn(),
  prompt_tokens: promptLen,
  generated_tokens: genLen,
  prefill_tok_s: Number(median(results.map(r => r.prefill)).toFixed(1)),
  decode_tok_s: Number(median(results.map(r => r.decode)).toFixed(1)),
  rss_mb: Math.round(process.memoryUsage().rss / 2 ** 20),
}
console.log(JSON.stringify(report, null, 2))
if (values.profile) {
  session.endProfiling()
  const newTrace = (prefix: string): string => {
    const trace = fs.readdirSync(profileDir).find(f => f.startsWith(`${prefix}_`) && !tracesBefore.has(f))
    if (!trace) throw new Error(`onnxruntime wrote no ${prefix} trace into ${profileDir}`)
    return path.join(profileDir, trace)
  }
  const file = newTrace('engine')
  const events = readTrace(file)
  let prompt, decode
  if (session.hasPromptGraph) {
    // Prompt runs went to the prompt graph's session, which traces apart.
    prompt = summarizeTrace(readTrace(newTrace('engine-prompt')), () => true)
    decode = summarizeTrace(events, () => true)
  } else {
    // Each pass is one prompt run followed by genLen decode steps.
    const isPrompt = (i: number): boolean => i % (genLen + 1) === 0
    prompt = summarizeTrace(events, isPrompt)
    decode = summarizeTrace(events, i => !isPrompt(i))
  }
  console.log(`\ntrace: ${path.relative(process.cwd(), file)}\n`)
  console.log(formatProfile('decode steps, by operator', decode, decode.byOp) + '\n')
  console.log(formatProfile('decode steps, by node family', decode, decode.byNode) + '\n')
  console.log(formatProfile(`prompt runs (${promptLen} tokens), by operator`, prompt, prompt.byOp) + '\n')
  console.log(formatProfile(`prompt runs (${promptLen} tokens), by node family`, prompt, prompt.byNode))
}
await session.close()
