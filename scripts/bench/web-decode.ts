// onnxruntime-web's decode steps for scripts/bench/graph-capture.ts: onnxruntime-web
// 1.30's WebGPU provider (the same C++ provider as onnxruntime-node's, compiled to
// WebAssembly) in Node over Dawn's Node binding (npm `webgpu`), with or without the
// provider's graph capture. The prompt runs on the GPU form with the cache in place; each
// decode step on the converter's static decode step, its inputs and outputs fixed GPU
// buffers written and read from JavaScript. A measurement, not chatd's engine.
import fs from 'node:fs'
import path from 'node:path'
import { argmax } from '../../src/engine/onnx/sampling/sampler.ts'
import type { ModelDir } from '../../src/engine/onnx/model-dir.ts'
import { rowOf, stepTimes, type RunArgs, type StepRun } from './decode-runs.ts'
import { median } from './rounds.ts'

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
export async function runWeb (args: RunArgs & { capture: boolean }): Promise<StepRun> {
  const { create, globals } = await import('webgpu')
  Object.assign(globalThis, globals)
  Object.defineProperty(globalThis.navigator, 'gpu', { value: create([]), configurable: true })
  const web = await import('onnxruntime-web/webgpu')
  web.env.wasm.numThreads = 1
  web.env.logLevel = (process.env.ORT_WEB_LOG ?? 'warning') as 'warning'
  type WebSession = Awaited<ReturnType<typeof web.InferenceSession.create>>
  const { form: model, maxLen, prompts, gen } = args
  const rows = prompts.length
  const promptLength = prompts[0].length
  // The decode step's dimensions, fixed: onnxruntime then folds the graph's shape arithmetic into
  // constants, and capture takes only graphs whose every node runs on the GPU.
  const fixedDims = { batch_size: rows, sequence_length: 1, total_sequence_length: maxLen, past_sequence_length: maxLen }
  const load = async ({ onnxPath: file }: ModelDir, capture: boolean, freeDimensionOverrides?: Record<string, number>): Promise<WebSession> => {
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
  const cacheDims = [rows, model.numKvHeads, maxLen, model.headDim]
  const cache: Record<string, ReturnType<typeof gpuTensor>> = {}
  const present: Record<string, ReturnType<typeof gpuTensor>> = {}
  for (let i = 0; i < model.numLayers; i++) {
    for (const kv of ['key', 'value']) {
      const t = gpuTensor(buffer(4 * rows * model.numKvHeads * maxLen * model.headDim), 'float32', cacheDims)
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
  let next = prompts.map((_, r) => argmax(rowOf(promptLogits, r, model.vocabSize)))
  const promptMs = performance.now() - t0

  // The decode step's inputs and outputs, fixed GPU buffers written from here.
  const ids = buffer(8 * rows)
  const positions = buffer(8 * rows)
  const mask = buffer(8 * rows * maxLen)
  const logits = buffer(4 * rows * model.vocabSize)
  const readback = device.createBuffer({ size: 4 * rows * model.vocabSize, usage: GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST })
  const ones = new BigInt64Array(rows * maxLen)
  for (let r = 0; r < rows; r++) ones.fill(1n, r * maxLen, r * maxLen + promptLength + 1)
  device.queue.writeBuffer(mask, 0, ones)
  const feeds = {
    input_ids: gpuTensor(ids, 'int64', [rows, 1]),
    attention_mask: gpuTensor(mask, 'int64', [rows, maxLen]),
    position_ids: gpuTensor(positions, 'int64', [rows, 1]),
    ...cache,
  }
  const fetches = { logits: gpuTensor(logits, 'float32', [rows, 1, model.vocabSize]), ...present }
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
    encoder.copyBufferToBuffer(logits, 0, readback, 0, 4 * rows * model.vocabSize)
    device.queue.submit([encoder.finish()])
    await readback.mapAsync(GPUMapMode.READ)
    const all = new Float32Array(readback.getMappedRange().slice(0))
    readback.unmap()
    next = next.map((_, r) => argmax(rowOf(all, r, model.vocabSize)))
    steps.push(performance.now() - t0)
    if (step === 0) firstLogits = next.map((_, r) => Array.from(rowOf(all, r, model.vocabSize)))
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
