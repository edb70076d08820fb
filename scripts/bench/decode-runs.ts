// Decode steps timed on one model, for scripts/bench/graph-capture.ts: the CPU
// provider's reference tokens, and chatd's engine's step today on onnxruntime-node's
// WebGPU provider (the GPU form, its cache in place). Each run starts from a prompt a
// row (rows of one length) and decodes `gen` greedy tokens, every row one token a step.
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import ort from 'onnxruntime-node'
import { GpuBuffers } from '../../src/engine/onnx/device/gpu-buffers.ts'
import type { ModelDir } from '../../src/engine/onnx/model-dir.ts'
import { argmax } from '../../src/engine/onnx/sampling/sampler.ts'
import { summarizeKernelTrace, type KernelProfile } from './kernel-profile.ts'
import { median } from './rounds.ts'

/** What a run of decode steps on one runtime measured. */
export interface StepRun {
  capture: boolean
  /** Each row's greedy tokens: the prompt's next token, then each decode step's. */
  tokens: number[][]
  prompt_ms: number
  /** The median decode step (every row one token): inputs written, the run, the logits read back and argmax. */
  step_ms_median: number
  step_ms_min: number
  /** The median time from the step's start to its run's return: the host's part (the GPU may still be working). */
  run_ms_median: number
  /** The first decode step (with capture: the run that records the graph). */
  first_step_ms: number
  session_load_s: number
  adapter: string
  /** onnxruntime-web: the WebGPU features its device was given (subgroups, shader-f16: which kernels it may pick). */
  device_features?: string[]
  /** Each row's logits after the first decode step. */
  first_logits: number[][]
  /** Each row's cache_delta of the first decode step ([2 x layers, kv heads, head_dim] flat), where the step returns it to the host. */
  first_cache_delta?: number[][]
  /** onnxruntime-node: where the time of further decode steps went, node by node and program by program (`profileSteps`). */
  kernel_profile?: KernelProfile
}

/** The GPU form (`form`), its static decode step (`decode`), a prompt a row, and the cache's length. */
export interface RunArgs {
  form: ModelDir
  decode: ModelDir
  prompts: number[][]
  gen: number
  maxLen: number
  /** onnxruntime-node: this many more decode steps after the timed ones, profiled, the trace written into `profileDir`. */
  profileSteps?: number
  profileDir?: string
}

/** Times of a run of steps: the median and fastest after the first `skip`, and the first. */
export function stepTimes (steps: number[], skip: number): Pick<StepRun, 'step_ms_median' | 'step_ms_min' | 'first_step_ms'> {
  const timed = steps.slice(skip)
  return { step_ms_median: median(timed), step_ms_min: Math.min(...timed), first_step_ms: steps[0] }
}

/** Row `row`'s logits of [rows, 1, vocab]. */
export const rowOf = (logits: Float32Array, row: number, vocab: number): Float32Array => logits.subarray(row * vocab, (row + 1) * vocab)

const int64 = (values: number[], dims: number[]): ort.Tensor => new ort.Tensor('int64', BigInt64Array.from(values, BigInt), dims)

/** The reference: the GPU form on onnxruntime-node's CPU provider, each row alone, the cache concatenated run by run. */
export async function cpuReference (model: ModelDir, prompts: number[][], gen: number): Promise<{ tokens: number[][]; firstLogits: Float32Array[]; firstDeltas: Float32Array[] }> {
  const session = await ort.InferenceSession.create(model.onnxPath, { executionProviders: ['cpu'], intraOpNumThreads: os.availableParallelism() })
  const tokens: number[][] = []
  const firstLogits: Float32Array[] = []
  const firstDeltas: Float32Array[] = []
  for (const prompt of prompts) {
    let past: Record<string, ort.Tensor> = {}
    for (let i = 0; i < model.numLayers; i++) {
      for (const kv of ['key', 'value']) past[`past_key_values.${i}.${kv}`] = new ort.Tensor('float32', new Float32Array(0), [1, model.numKvHeads, 0, model.headDim])
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
      if (step === 1) {
        firstLogits.push(logits.slice())
        firstDeltas.push((out.cache_delta.data as Float32Array).slice())
      }
      const next = argmax(logits)
      row.push(next)
      past = {}
      for (let i = 0; i < model.numLayers; i++) {
        for (const kv of ['key', 'value']) past[`past_key_values.${i}.${kv}`] = out[`present.${i}.${kv}`]
      }
      length = total
      ids = [next]
    }
    // The prompt's next token, then each decode step's.
    tokens.push(row)
  }
  await session.release()
  return { tokens, firstLogits, firstDeltas }
}

/**
 * chatd's engine's step today: the GPU form on onnxruntime-node's WebGPU provider with its cache in
 * place (one GPU buffer per layer's keys and values, `maxLen` positions a row, made as the engine
 * makes them), the rows' logits read back every run.
 */
export async function runNode (args: RunArgs): Promise<StepRun> {
  const { form: model, maxLen, prompts, gen } = args
  const rows = prompts.length
  const started = performance.now()
  const session = await ort.InferenceSession.create(model.onnxPath, { executionProviders: ['webgpu'] })
  const buffers = await GpuBuffers.open()
  const cache: Record<string, ort.Tensor> = {}
  for (let i = 0; i < model.numLayers; i++) {
    for (const kv of ['key', 'value']) cache[`past_key_values.${i}.${kv}`] = await buffers.padded(new ort.Tensor('float32', new Float32Array(0), [rows, model.numKvHeads, 0, model.headDim]), maxLen)
  }
  const sessionLoad = (performance.now() - started) / 1000
  const fetches = { logits: null, cache_delta: null, ...Object.fromEntries(Object.entries(cache).map(([name, t]) => [name.replace('past_key_values', 'present'), t])) }
  /** Every row's `ids` (rows of one length) after `past` positions; every row's logits. */
  const run = async (ids: number[][], past: number, on = session): Promise<Float32Array> => {
    const seq = ids[0].length
    const out = await on.run({
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
  let next = prompts.map((_, r) => argmax(rowOf(promptLogits, r, model.vocabSize)))
  const tokens = next.map(t => [t])
  const steps: number[] = []
  let firstLogits: number[][] = []
  for (let step = 0; step < gen; step++) {
    t0 = performance.now()
    const logits = await run(next.map(t => [t]), prompts[0].length + step)
    next = next.map((_, r) => argmax(rowOf(logits, r, model.vocabSize)))
    steps.push(performance.now() - t0)
    if (step === 0) firstLogits = next.map((_, r) => Array.from(rowOf(logits, r, model.vocabSize)))
    next.forEach((t, r) => tokens[r].push(t))
  }
  for (const row of tokens) row.pop()
  const kernelProfile = args.profileSteps ? await profileSteps(model, args, next, run) : undefined
  await buffers.close()
  await session.release()
  const times = stepTimes(steps, 1)
  return { capture: false, tokens, prompt_ms: promptMs, ...times, run_ms_median: times.step_ms_median, session_load_s: sessionLoad, adapter: 'onnxruntime-node', first_logits: firstLogits, ...(kernelProfile ? { kernel_profile: kernelProfile } : {}) }
}

/**
 * Runs up to `args.profileSteps` more decode steps (what room the cache has left) on a second
 * session of the same file, profiling, on the same cache buffers (one WebGPU device a process),
 * so its trace holds decode steps only; returns its summary.
 */
async function profileSteps (model: ModelDir, args: RunArgs, next: number[], run: (ids: number[][], past: number, on: ort.InferenceSession) => Promise<unknown>): Promise<KernelProfile> {
  const dir = args.profileDir ?? os.tmpdir()
  const prefix = `node-decode-${process.pid}`
  const profiled = await ort.InferenceSession.create(model.onnxPath, { executionProviders: ['webgpu'], enableProfiling: true, profileFilePrefix: path.join(dir, prefix) })
  let past = args.prompts[0].length + args.gen
  for (let i = 0; i < (args.profileSteps ?? 0) && past + 1 <= args.maxLen; i++, past++) await run(next.map(t => [t]), past, profiled)
  profiled.endProfiling()
  await profiled.release()
  const trace = fs.readdirSync(dir).find(f => f.startsWith(`${prefix}_`))
  if (!trace) throw new Error(`onnxruntime wrote no ${prefix} trace into ${dir}`)
  return summarizeKernelTrace(path.join(dir, trace))
}
