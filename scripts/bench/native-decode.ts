// Decode steps on onnxruntime's own (native) WebGPU provider with its graph capture on,
// for scripts/bench/graph-capture.ts: the same libonnxruntime as onnxruntime-node's,
// reached through its C API (ort-capi.ts), since the binding cannot turn capture on. The
// prompt runs on the GPU form with the cache in place; each decode step on the
// converter's static decode step, every input and output a fixed GPU tensor bound once.
// Inputs go up, and the logits and the step's new keys and values (cache_delta, what
// keeps the host's copy of the cache that chatd's prefix cache reads) come down, through
// two small sessions of their own (the engine's capture step's Identity graphs), which
// onnxruntime copies across devices for: the captured session's runs replay its recorded
// kernels and copy nothing.
// So a step costs what serving a row this way would. A measurement, not chatd's engine.
import { DOWNLOAD_GRAPH, LOAD_GRAPH, UPLOAD_GRAPH } from '../../src/engine/onnx/device/captured-step.ts'
import { argmax } from '../../src/engine/onnx/sampling/sampler.ts'
import { rowOf, stepTimes, type RunArgs, type StepRun } from './decode-runs.ts'
import { median } from './rounds.ts'
import { OrtCApi, type Value } from '../../src/engine/onnx/device/ort-capi.ts'

/** The rows on onnxruntime's native WebGPU provider, the decode step captured. */
export async function runNative (args: RunArgs): Promise<StepRun> {
  const { form: model, maxLen, prompts, gen } = args
  const rows = prompts.length
  const n = prompts[0].length
  const vocab = model.vocabSize
  const api = new OrtCApi(process.env.ORT_NATIVE_LOG === 'verbose' ? 0 : 3)
  try {
    const started = performance.now()
    const promptSession = api.session(model.onnxPath, { webgpu: {} })
    const decodeSession = api.session(args.decode.onnxPath, {
      webgpu: { enableGraphCapture: '1' },
      // Its information lines say when a run replays the captured graph ("Replaying the captured ...").
      logLevel: 1,
      // Every dimension fixed: shape arithmetic folds into constants and every node runs on the GPU.
      dims: { batch_size: rows, sequence_length: 1, total_sequence_length: maxLen, past_sequence_length: maxLen },
    })
    const upload = api.session(UPLOAD_GRAPH, { webgpu: {} })
    const download = api.session(DOWNLOAD_GRAPH, { webgpu: {} })
    const deltaDims = [2 * model.numLayers, rows, model.numKvHeads, 1, model.headDim]
    const sessionLoad = (performance.now() - started) / 1000

    // The cache: one GPU tensor per layer's keys and values, maxLen positions a row, past and present of
    // every run; zeros first, written on the GPU (the load graph pads one position of zeros to maxLen).
    const cacheDims = [rows, model.numKvHeads, maxLen, model.headDim]
    const zeros = api.hostTensor('float', [rows, model.numKvHeads, 1, model.headDim])
    const pads = api.hostTensor('int64', [8])
    new BigInt64Array(pads.view as ArrayBuffer)[6] = BigInt(maxLen - 1)
    const clear = api.session(LOAD_GRAPH, { webgpu: {} })
    const past: Record<string, Value> = {}
    const present: Record<string, Value> = {}
    for (let i = 0; i < model.numLayers; i++) {
      for (const kv of ['key', 'value']) {
        const t = decodeSession.gpuTensor('float', cacheDims)
        clear.run({ cache: zeros, pads }, { cache_out: t })
        past[`past_key_values.${i}.${kv}`] = t
        present[`present.${i}.${kv}`] = t
      }
    }

    // The prompts (rows of one length), in one run on the GPU form with the cache in place; its inputs on the host.
    const promptIds = api.hostTensor('int64', [rows, n])
    const promptMask = api.hostTensor('int64', [rows, n])
    const promptPositions = api.hostTensor('int64', [rows, n])
    const keep = api.hostTensor('int64', [])
    new BigInt64Array(promptIds.view as ArrayBuffer).set(prompts.flat().map(BigInt))
    new BigInt64Array(promptMask.view as ArrayBuffer).fill(1n)
    new BigInt64Array(promptPositions.view as ArrayBuffer).set(prompts.flatMap(p => p.map((_, j) => BigInt(j))))
    new BigInt64Array(keep.view as ArrayBuffer)[0] = 1n
    const hostLogits = api.hostTensor('float', [rows, 1, vocab])
    const logitsView = new Float32Array(hostLogits.view as ArrayBuffer)
    let t0 = performance.now()
    promptSession.run({ input_ids: promptIds, attention_mask: promptMask, position_ids: promptPositions, num_logits_to_keep: keep, ...past }, { logits: hostLogits, ...present })
    let next = prompts.map((_, r) => argmax(rowOf(logitsView, r, vocab)))
    const promptMs = performance.now() - t0

    // The decode step's inputs and outputs: fixed GPU tensors, written through `upload`, the
    // logits read through `download`.
    const ids = decodeSession.gpuTensor('int64', [rows, 1])
    const positions = decodeSession.gpuTensor('int64', [rows, 1])
    const mask = decodeSession.gpuTensor('int64', [rows, maxLen])
    const logits = decodeSession.gpuTensor('float', [rows, 1, vocab])
    const delta = decodeSession.gpuTensor('float', deltaDims)
    const hostDelta = api.hostTensor('float', deltaDims)
    const deltaView = new Float32Array(hostDelta.view as ArrayBuffer)
    const hostIds = api.hostTensor('int64', [rows, 1])
    const hostPositions = api.hostTensor('int64', [rows, 1])
    const hostMask = api.hostTensor('int64', [rows, maxLen])
    const idsView = new BigInt64Array(hostIds.view as ArrayBuffer)
    const positionsView = new BigInt64Array(hostPositions.view as ArrayBuffer)
    const maskView = new BigInt64Array(hostMask.view as ArrayBuffer)
    for (let r = 0; r < rows; r++) maskView.fill(1n, r * maxLen, r * maxLen + n)
    // Bound anew for each run: onnxruntime copies a host input to the GPU when it is bound.
    const sendInputs = (): void => upload.run({ input_ids: hostIds, position_ids: hostPositions, attention_mask: hostMask }, { input_ids_out: ids, position_ids_out: positions, attention_mask_out: mask })
    const step = decodeSession.bind({ input_ids: ids, attention_mask: mask, position_ids: positions, ...past }, { logits, cache_delta: delta, ...present })
    // Bound for each run too, as the engine's capture step does (CapturedStep).
    const readBack = (): void => download.run({ logits, cache_delta: delta }, { logits_out: hostLogits, cache_delta_out: hostDelta })

    const tokens = next.map(t => [t])
    const steps: number[] = []
    const runs: number[] = []
    let firstLogits: number[][] = []
    let firstDelta: number[][] = []
    // Each row's slice of a delta [2 x layers, rows, kv heads, 1, head_dim].
    const slab = model.numKvHeads * model.headDim
    const rowDelta = (r: number): number[] => Array.from({ length: 2 * model.numLayers }, (_, l) => Array.from(deltaView.subarray((l * rows + r) * slab, (l * rows + r + 1) * slab))).flat()
    for (let s = 0; s < gen; s++) {
      const position = n + s
      if (position >= maxLen) throw new Error(`--max-len ${maxLen} is too short for ${n} + ${gen} tokens`)
      t0 = performance.now()
      for (let r = 0; r < rows; r++) {
        idsView[r] = BigInt(next[r])
        positionsView[r] = BigInt(position)
        maskView[r * maxLen + position] = 1n
      }
      sendInputs()
      step()
      runs.push(performance.now() - t0)
      readBack()
      next = next.map((_, r) => argmax(rowOf(logitsView, r, vocab)))
      steps.push(performance.now() - t0)
      if (s === 0) {
        firstLogits = next.map((_, r) => Array.from(rowOf(logitsView, r, vocab)))
        firstDelta = next.map((_, r) => rowDelta(r))
      }
      next.forEach((t, r) => tokens[r].push(t))
    }
    for (const row of tokens) row.pop() // the last step's token has no step of its own in the CPU's list
    // The first runs record the graph (onnxruntime runs a step normally before it captures): time the rest.
    const skip = 3
    return {
      capture: true,
      tokens,
      prompt_ms: promptMs,
      ...stepTimes(steps, skip),
      run_ms_median: median(runs.slice(skip)),
      session_load_s: sessionLoad,
      adapter: 'onnxruntime native (C API)',
      first_logits: firstLogits,
      first_cache_delta: firstDelta,
    }
  } finally {
    api.close()
  }
}
