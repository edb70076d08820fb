// A decode step for one row that the WebGPU provider records once and replays
// (graph capture): what takes the host's dispatch of every kernel (~20 µs each, ~300
// a step for the 1.5B) out of a step on a GPU. onnxruntime-node cannot turn capture
// on, so this runs on onnxruntime's C API (ort-capi.ts), in the same library and on
// the same WebGPU device as the engine's sessions.
//
// The step is the converter's static decode graph (model_step.onnx): one row, one
// token, the cache `length` positions long, the same shapes every run. A replay repeats
// the recorded kernels on the recorded buffers, so every input and output is a fixed
// GPU tensor bound once: the cache (one tensor per layer's keys and values), the token,
// its position and the mask (ones up to the new token) go up through a small session
// of Identity nodes, and the logits and the step's new keys and values (cache_delta)
// come down through another, which onnxruntime copies across devices for.
//
// Its buffers hold one row's cache at a time (`holder`): load() copies a row's cache in
// from the host's copy, which stays the truth (each step's cache_delta is written into
// it by the caller, as for every other run), so a row can leave and come back, and the
// scheduler's gathers and the prefix cache read the host's copy as always.
import { CAPTURE_STEP_FILE, type ModelDir } from '../model-dir.ts'
import { cacheDeltaEntries } from './decoder-session.ts'
import { OrtCApi, type BoundRun, type Value } from './ort-capi.ts'

// Small graphs over symbolic dimensions, kept as bytes as chatd's graph writer writes them
// (the runtime never imports the converter; test/engine/onnx/device/captured-step.test.ts
// rebuilds them and compares). Each takes `name` to `name_out`.
/** input_ids [rows, one], position_ids [rows, one], attention_mask [rows, length], int64. */
export const UPLOAD_GRAPH = Buffer.from('CAgSBWNoYXRkGgExOq8DCjIKCWlucHV0X2lkcxINaW5wdXRfaWRzX291dBoKSWRlbnRpdHlfMCIISWRlbnRpdHk6AAo4Cgxwb3NpdGlvbl9pZHMSEHBvc2l0aW9uX2lkc19vdXQaCklkZW50aXR5XzEiCElkZW50aXR5OgAKPAoOYXR0ZW50aW9uX21hc2sSEmF0dGVudGlvbl9tYXNrX291dBoKSWRlbnRpdHlfMiIISWRlbnRpdHk6ABIHZGVjb2RlcloiCglpbnB1dF9pZHMSFQoTCAcSDwoGEgRyb3dzCgUSA29uZVolCgxwb3NpdGlvbl9pZHMSFQoTCAcSDwoGEgRyb3dzCgUSA29uZVoqCg5hdHRlbnRpb25fbWFzaxIYChYIBxISCgYSBHJvd3MKCBIGbGVuZ3RoYiYKDWlucHV0X2lkc19vdXQSFQoTCAcSDwoGEgRyb3dzCgUSA29uZWIpChBwb3NpdGlvbl9pZHNfb3V0EhUKEwgHEg8KBhIEcm93cwoFEgNvbmViLgoSYXR0ZW50aW9uX21hc2tfb3V0EhgKFggHEhIKBhIEcm93cwoIEgZsZW5ndGhCBAoAEBE=', 'base64')
/** logits [rows, one, vocab], cache_delta [layers, rows, heads, one, dim], float. */
export const DOWNLOAD_GRAPH = Buffer.from('CAgSBWNoYXRkGgExOssCCiwKBmxvZ2l0cxIKbG9naXRzX291dBoKSWRlbnRpdHlfMCIISWRlbnRpdHk6AAo2CgtjYWNoZV9kZWx0YRIPY2FjaGVfZGVsdGFfb3V0GgpJZGVudGl0eV8xIghJZGVudGl0eToAEgdkZWNvZGVyWigKBmxvZ2l0cxIeChwIARIYCgYSBHJvd3MKBRIDb25lCgcSBXZvY2FiWj4KC2NhY2hlX2RlbHRhEi8KLQgBEikKCBIGbGF5ZXJzCgYSBHJvd3MKBxIFaGVhZHMKBRIDb25lCgUSA2RpbWIsCgpsb2dpdHNfb3V0Eh4KHAgBEhgKBhIEcm93cwoFEgNvbmUKBxIFdm9jYWJiQgoPY2FjaGVfZGVsdGFfb3V0Ei8KLQgBEikKCBIGbGF5ZXJzCgYSBHJvd3MKBxIFaGVhZHMKBRIDb25lCgUSA2RpbUIECgAQEQ==', 'base64')
/**
 * Pad of a row's cache [rows, heads, length, dim] (float) by `pads` [8] (int64) into cache_out
 * [rows, heads, room, dim]: a row's positions go up, and the buffer's rest is zeroed on the GPU.
 */
export const LOAD_GRAPH = Buffer.from('CAgSBWNoYXRkGgExOq0BCiYKBWNhY2hlCgRwYWRzEgljYWNoZV9vdXQaBVBhZF8wIgNQYWQ6ABIHZGVjb2RlcloxCgVjYWNoZRIoCiYIARIiCgYSBHJvd3MKBxIFaGVhZHMKCBIGbGVuZ3RoCgUSA2RpbVoSCgRwYWRzEgoKCAgHEgQKAggIYjMKCWNhY2hlX291dBImCiQIARIgCgYSBHJvd3MKBxIFaGVhZHMKBhIEcm9vbQoFEgNkaW1CBAoAEBE=', 'base64')

export interface StepOutput {
  /** The row's logits, [vocab]: a view the next step overwrites. */
  logits: Float32Array
  /** The step's keys and values for the host's copy, by cache name ([kv heads, 1, head_dim] each): views the next step overwrites. */
  newEntries: Record<string, Float32Array>
}

export class CapturedStep {
  readonly model: ModelDir
  /** Positions the cache buffers hold: a row's prompt and output together must fit. */
  readonly length: number
  /** Bytes of GPU memory its cache buffers take. */
  readonly cacheBytes: number
  readonly #api: OrtCApi
  readonly #names: string[]
  readonly #sendInputs: () => void
  readonly #step: BoundRun
  readonly #readBack: () => void
  readonly #loadLayer: Array<(rows: Value) => void>
  readonly #stagingTensor: Value
  readonly #staging: Float32Array
  readonly #pads: BigInt64Array
  readonly #ids: BigInt64Array
  readonly #positions: BigInt64Array
  readonly #mask: BigInt64Array
  readonly #logits: Float32Array
  readonly #entries: Record<string, Float32Array>
  /** Whose cache the buffers hold, and how many of its positions; null when none. */
  #holder: { of: object; length: number } | null = null
  #closed = false

  private constructor (model: ModelDir, length: number, api: OrtCApi) {
    if (!model.stepOnnxPath) throw new Error(`${model.dir}: no onnx/${CAPTURE_STEP_FILE} (convert the model again with chatd convert --for gpu --capture-step)`)
    this.model = model
    this.length = length
    this.#api = api
    const { numLayers, numKvHeads: heads, headDim: dim, vocabSize: vocab } = model
    const cacheDims = [1, heads, length, dim]
    const deltaDims = [2 * numLayers, 1, heads, 1, dim]
    const host = { ids: api.hostTensor('int64', [1, 1]), positions: api.hostTensor('int64', [1, 1]), mask: api.hostTensor('int64', [1, length]), logits: api.hostTensor('float', [1, 1, vocab]), delta: api.hostTensor('float', deltaDims), staging: api.hostTensor('float', cacheDims), pads: api.hostTensor('int64', [8]) }
    // The step's keys and values by cache name, views of the read-back delta; their names are the cache's.
    this.#entries = cacheDeltaEntries(new Float32Array(host.delta.view as ArrayBuffer), numLayers)
    this.#names = Object.keys(this.#entries)
    this.cacheBytes = this.#names.length * heads * length * dim * 4
    const decode = api.session(model.stepOnnxPath, {
      webgpu: { enableGraphCapture: '1' },
      // Every dimension fixed: the shape arithmetic folds into constants, and every node runs on the GPU (capture needs both).
      dims: { batch_size: 1, sequence_length: 1, total_sequence_length: length, past_sequence_length: length },
    })
    const upload = api.session(UPLOAD_GRAPH, { webgpu: {} })
    const download = api.session(DOWNLOAD_GRAPH, { webgpu: {} })
    const loader = api.session(LOAD_GRAPH, { webgpu: {} })

    const gpu = { ids: decode.gpuTensor('int64', [1, 1]), positions: decode.gpuTensor('int64', [1, 1]), mask: decode.gpuTensor('int64', [1, length]), logits: decode.gpuTensor('float', [1, 1, vocab]), delta: decode.gpuTensor('float', deltaDims) }
    const past: Record<string, Value> = {}
    const present: Record<string, Value> = {}
    for (const name of this.#names) {
      past[name] = decode.gpuTensor('float', cacheDims)
      present[name.replace('past_key_values', 'present')] = past[name]
    }
    // Bound anew for each run: onnxruntime copies a host input to the GPU when it is bound.
    this.#sendInputs = () => upload.run({ input_ids: host.ids, position_ids: host.positions, attention_mask: host.mask }, { input_ids_out: gpu.ids, position_ids_out: gpu.positions, attention_mask_out: gpu.mask })
    this.#step = decode.bind({ input_ids: gpu.ids, position_ids: gpu.positions, attention_mask: gpu.mask, ...past }, { logits: gpu.logits, cache_delta: gpu.delta, ...present })
    // Bound for each run too: were a provider to run the copy on the host, it would read the GPU tensor at binding.
    this.#readBack = () => download.run({ logits: gpu.logits, cache_delta: gpu.delta }, { logits_out: host.logits, cache_delta_out: host.delta })
    this.#loadLayer = this.#names.map(name => rows => loader.run({ cache: rows, pads: host.pads }, { cache_out: past[name] }))
    this.#stagingTensor = host.staging
    this.#staging = new Float32Array(host.staging.view as ArrayBuffer)
    this.#pads = new BigInt64Array(host.pads.view as ArrayBuffer)
    this.#ids = new BigInt64Array(host.ids.view as ArrayBuffer)
    this.#positions = new BigInt64Array(host.positions.view as ArrayBuffer)
    this.#mask = new BigInt64Array(host.mask.view as ArrayBuffer)
    this.#logits = new Float32Array(host.logits.view as ArrayBuffer)
  }

  /**
   * Opens the model's step (model_step.onnx) on the WebGPU device with capture, its cache `length`
   * positions long. Synchronous: a few seconds for the 1.5B (its weights go up to the GPU).
   */
  static open (model: ModelDir, length: number): CapturedStep {
    if (!Number.isInteger(length) || length < 2) throw new Error(`a captured step's cache holds at least 2 positions (asked for ${length})`)
    const api = new OrtCApi()
    try {
      return new CapturedStep(model, length, api)
    } catch (err) {
      api.close()
      throw err
    }
  }

  /** Whether its buffers hold `of`'s cache, `length` positions of it. */
  holds (of: object, length: number): boolean {
    return this.#holder?.of === of && this.#holder.length === length
  }

  /**
   * Copies a row's cache into the buffers from the host's copy: `buffers` by cache name, each
   * [1, kv heads, capacity, head_dim], its first `length` positions the row's.
   */
  load (of: object, buffers: Record<string, Float32Array>, capacity: number, length: number): void {
    this.#check()
    if (length >= this.length) throw new Error(`a captured step of ${this.length} positions cannot take a row of ${length}`)
    this.#holder = null
    const { numKvHeads: heads, headDim: dim } = this.model
    // Only the row's positions go up, packed head after head; Pad zeroes the rest on the GPU.
    const rows = this.#api.hostView(this.#stagingTensor, [1, heads, length, dim])
    this.#pads.fill(0n)
    this.#pads[6] = BigInt(this.length - length) // after axis 2's end
    try {
      this.#loadLayer.forEach((load, i) => {
        const from = buffers[this.#names[i]]
        for (let h = 0; h < heads; h++) this.#staging.set(from.subarray(h * capacity * dim, (h * capacity + length) * dim), h * length * dim)
        load(rows.value)
      })
    } finally {
      rows.release()
    }
    this.#mask.fill(0n)
    this.#mask.fill(1n, 0, length)
    this.#holder = { of, length }
  }

  /** Lets go of `of`'s cache if the buffers hold it (the row ended). */
  release (of: object): void {
    if (this.#holder?.of === of) this.#holder = null
  }

  /** One step of the row its buffers hold: `token` at the next position. */
  step (of: object, token: number): StepOutput {
    this.#check()
    const holder = this.#holder
    if (holder?.of !== of) throw new Error('the captured step\'s buffers hold another row\'s cache')
    const position = holder.length
    if (position >= this.length) throw new Error(`the captured step's ${this.length} positions are full`)
    this.#ids[0] = BigInt(token)
    this.#positions[0] = BigInt(position)
    this.#mask[position] = 1n
    // Held as not holding until the step is done: a failed step leaves the buffers unknown.
    this.#holder = null
    this.#sendInputs()
    this.#step()
    this.#readBack()
    this.#holder = { of, length: position + 1 }
    return { logits: this.#logits, newEntries: this.#entries }
  }

  close (): void {
    if (this.#closed) return
    this.#closed = true
    this.#holder = null
    this.#api.close()
  }

  #check (): void {
    if (this.#closed) throw new Error('the captured step is closed')
  }
}
