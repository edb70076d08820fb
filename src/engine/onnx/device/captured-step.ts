// A decode step that the WebGPU provider records once and replays (graph capture):
// what takes the host's dispatch of every kernel (~20 µs each, ~240 a step for the
// 1.5B) out of a step on a GPU. onnxruntime-node cannot turn capture on, so this runs
// on onnxruntime's C API (ort-capi.ts), in the same library and on the same WebGPU
// device as the engine's sessions.
//
// The step is the converter's static decode graph (model_step.onnx): `rows` rows of one
// token each, the cache `length` positions a row, the same shapes every run. A replay
// repeats the recorded kernels on the recorded buffers, so every input and output is a
// fixed GPU tensor bound once: the cache (one tensor per layer's keys and values, a slot
// per row), the tokens, their positions and the mask (ones up to each row's new token)
// go up through a small session of Identity nodes, and the logits and the step's new
// keys and values (cache_delta) come down through another, which onnxruntime copies
// across devices for. Each slot's row starts at position 0 and is as long as its own
// mask says (the step's attention reads each row's own positions), so rows of any
// lengths step together; a slot no row takes steps too, on one masked-in position.
//
// The slots hold rows' caches by key (a caller's object naming one row's exact
// contents): a step whose rows are all held at their lengths is a replay and no more;
// otherwise the step's rows are loaded first, all of them, from the host's copies,
// which stay the truth (each step's cache_delta is written into them by the caller, as
// for every other run). Loading all: a slot cannot be written alone in place (a load is
// a graph whose output is the whole buffer), so a row joining reloads its companions;
// rows leaving reload nothing. The scheduler's gathers and the prefix cache read the
// host's copy as always.
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

/** A row of a step: its cache in the host's copy, and its next token. */
export interface StepRow {
  /** Names the row's exact contents: the key a step gave it, or a new object (the row is loaded). */
  key: object
  /** Positions the row holds; its token goes at this position. */
  length: number
  token: number
  /** The host's copy by cache name, [rows, kv heads, capacity, head_dim]: the row is row `row`. */
  buffers: Record<string, Float32Array>
  capacity: number
  row: number
}

export interface StepOutput {
  /** Each row's logits ([vocab]), in the order of the step's rows: views the next step overwrites. */
  logits: Float32Array[]
  /** Each row's new keys and values for the host's copy, by cache name ([kv heads, 1, head_dim] each): views the next step overwrites. */
  newEntries: Array<Record<string, Float32Array>>
  /** Each row's key now: a row's next step passes it, and the step finds the row still held. */
  keys: object[]
  /** Whether the rows were loaded from the host's copies first (one or more was not held). */
  loaded: boolean
}

/** What a slot holds: the row named by `key`, `length` positions of it. */
interface Holder { key: object; length: number }

export class CapturedStep {
  readonly model: ModelDir
  /** Positions each slot holds: a row's prompt and output together must fit. */
  readonly length: number
  /** Rows a step takes at most (its slots). */
  readonly rows: number
  /** Bytes of GPU memory its cache buffers take. */
  readonly cacheBytes: number
  readonly #api: OrtCApi
  readonly #names: string[]
  readonly #sendInputs: () => void
  readonly #step: BoundRun
  readonly #readBack: () => void
  readonly #loadLayer: Array<(rows: Value) => void>
  /** Where a load stages the rows' positions on the host: made at the first load, grown as loads need. */
  #staging: { tensor: Value; data: Float32Array } | null = null
  readonly #pads: BigInt64Array
  readonly #ids: BigInt64Array
  readonly #positions: BigInt64Array
  readonly #mask: BigInt64Array
  /** Ones at the start of each slot's mask row (the rest are zeros). */
  readonly #maskOnes: number[]
  /** Each slot's logits and new keys and values: views of the read-back tensors. */
  readonly #slotLogits: Float32Array[]
  readonly #slotEntries: Array<Record<string, Float32Array>>
  /** What each slot holds; null when nothing known (free, or a step or load that failed). */
  readonly #slots: Array<Holder | null>
  #closed = false

  private constructor (model: ModelDir, length: number, rows: number, api: OrtCApi) {
    if (!model.stepOnnxPath) throw new Error(`${model.dir}: no onnx/${CAPTURE_STEP_FILE} (convert the model again with chatd convert --for gpu --capture-step)`)
    this.model = model
    this.length = length
    this.rows = rows
    this.#api = api
    const { numLayers, numKvHeads: heads, headDim: dim, vocabSize: vocab } = model
    const cacheDims = [rows, heads, length, dim]
    const deltaDims = [2 * numLayers, rows, heads, 1, dim]
    const host = { ids: api.hostTensor('int64', [rows, 1]), positions: api.hostTensor('int64', [rows, 1]), mask: api.hostTensor('int64', [rows, length]), logits: api.hostTensor('float', [rows, 1, vocab]), delta: api.hostTensor('float', deltaDims), pads: api.hostTensor('int64', [8]) }
    // Each layer's keys or values in the read-back delta, [rows, heads, 1, dim], a slot's [heads, 1, dim] after another's.
    const entries = cacheDeltaEntries(new Float32Array(host.delta.view as ArrayBuffer), numLayers)
    this.#names = Object.keys(entries)
    const logits = new Float32Array(host.logits.view as ArrayBuffer)
    this.#slotLogits = Array.from({ length: rows }, (_, s) => logits.subarray(s * vocab, (s + 1) * vocab))
    this.#slotEntries = Array.from({ length: rows }, (_, s) => Object.fromEntries(this.#names.map(name => [name, entries[name].subarray(s * heads * dim, (s + 1) * heads * dim)])))
    this.cacheBytes = this.#names.length * rows * heads * length * dim * 4
    const decode = api.session(model.stepOnnxPath, {
      webgpu: { enableGraphCapture: '1' },
      // Every dimension fixed: the shape arithmetic folds into constants, and every node runs on the GPU (capture needs both).
      dims: { batch_size: rows, sequence_length: 1, total_sequence_length: length, past_sequence_length: length },
    })
    const upload = api.session(UPLOAD_GRAPH, { webgpu: {} })
    const download = api.session(DOWNLOAD_GRAPH, { webgpu: {} })
    const loader = api.session(LOAD_GRAPH, { webgpu: {} })

    const gpu = { ids: decode.gpuTensor('int64', [rows, 1]), positions: decode.gpuTensor('int64', [rows, 1]), mask: decode.gpuTensor('int64', [rows, length]), logits: decode.gpuTensor('float', [rows, 1, vocab]), delta: decode.gpuTensor('float', deltaDims) }
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
    this.#loadLayer = this.#names.map(name => staged => loader.run({ cache: staged, pads: host.pads }, { cache_out: past[name] }))
    this.#pads = new BigInt64Array(host.pads.view as ArrayBuffer)
    this.#ids = new BigInt64Array(host.ids.view as ArrayBuffer)
    this.#positions = new BigInt64Array(host.positions.view as ArrayBuffer)
    this.#mask = new BigInt64Array(host.mask.view as ArrayBuffer)
    this.#maskOnes = new Array<number>(rows).fill(0)
    this.#slots = new Array<Holder | null>(rows).fill(null)
    for (let s = 0; s < rows; s++) this.#freeSlot(s)
  }

  /**
   * Opens the model's step (model_step.onnx) on the WebGPU device with capture: `rows` rows a step,
   * each slot's cache `length` positions long. Synchronous: a few seconds for the 1.5B (its
   * weights go up to the GPU).
   */
  static open (model: ModelDir, length: number, rows = 1): CapturedStep {
    if (!Number.isInteger(length) || length < 2) throw new Error(`a captured step's cache holds at least 2 positions (asked for ${length})`)
    if (!Number.isInteger(rows) || rows < 1) throw new Error(`a captured step takes at least one row (asked for ${rows})`)
    const api = new OrtCApi()
    try {
      return new CapturedStep(model, length, rows, api)
    } catch (err) {
      api.close()
      throw err
    }
  }

  /** Bytes of host memory its loads stage rows in: what loads have needed so far, up to the size of its cache buffers. */
  get stagingBytes (): number {
    return (this.#staging?.data.length ?? 0) * 4
  }

  /** Whether a slot holds the row named by `key`, `length` positions of it. */
  holds (key: object, length: number): boolean {
    return this.#slots.some(h => h?.key === key && h.length === length)
  }

  /**
   * One step of `rows` (at most `this.rows`, each shorter than `this.length`): each row's token at
   * its next position. Rows the slots do not hold at their lengths are loaded first (all the
   * step's rows); slots no row takes are let go.
   */
  step (rows: StepRow[]): StepOutput {
    this.#check()
    if (rows.length === 0 || rows.length > this.rows) throw new Error(`a captured step takes 1 to ${this.rows} rows (got ${rows.length})`)
    for (const row of rows) {
      if (row.length >= this.length) throw new Error(`a captured step of ${this.length} positions cannot take a row of ${row.length}`)
    }
    let slots = rows.map(row => this.#slots.findIndex(h => h?.key === row.key && h.length === row.length))
    const loaded = slots.some((s, i) => s < 0 || slots.indexOf(s) !== i)
    if (loaded) {
      this.#load(rows)
      slots = rows.map((_, i) => i)
    }
    const taken = new Set(slots)
    for (let s = 0; s < this.rows; s++) if (!taken.has(s)) this.#freeSlot(s)
    rows.forEach((row, i) => {
      const s = slots[i]
      this.#ids[s] = BigInt(row.token)
      this.#positions[s] = BigInt(row.length)
      this.#setMaskOnes(s, row.length + 1)
      // Held as nothing until the step is done: a failed step leaves the buffers unknown.
      this.#slots[s] = null
    })
    this.#sendInputs()
    this.#step()
    this.#readBack()
    const keys = rows.map(() => ({}))
    rows.forEach((row, i) => { this.#slots[slots[i]] = { key: keys[i], length: row.length + 1 } })
    return { logits: slots.map(s => this.#slotLogits[s]), newEntries: slots.map(s => this.#slotEntries[s]), keys, loaded }
  }

  close (): void {
    if (this.#closed) return
    this.#closed = true
    this.#slots.fill(null)
    this.#api.close()
  }

  /**
   * Row i of `rows` into slot i, from the host's copies: only the rows' positions go up (as one
   * tensor a layer, the rows side by side, each as long as the longest); Pad fills the rest of
   * the buffers, the other slots included, with zeros on the GPU.
   */
  #load (rows: StepRow[]): void {
    this.#slots.fill(null)
    const { numKvHeads: heads, headDim: dim } = this.model
    const longest = Math.max(1, ...rows.map(r => r.length))
    const staging = this.#stagingFor(rows.length * heads * longest * dim)
    const staged = this.#api.hostView(staging.tensor, [rows.length, heads, longest, dim])
    this.#pads.fill(0n)
    this.#pads[4] = BigInt(this.rows - rows.length) // after axis 0's end: the slots no row takes
    this.#pads[6] = BigInt(this.length - longest) // after axis 2's end: the room past the longest row
    try {
      this.#loadLayer.forEach((load, l) => {
        const name = this.#names[l]
        rows.forEach((row, i) => {
          const from = row.buffers[name]
          // Past a shorter row's end, the staging's stale values: never read (its mask ends there).
          for (let h = 0; h < heads; h++) {
            const start = (row.row * heads + h) * row.capacity * dim
            staging.data.set(from.subarray(start, start + row.length * dim), (i * heads + h) * longest * dim)
          }
        })
        load(staged.value)
      })
    } finally {
      staged.release()
    }
    rows.forEach((row, i) => {
      this.#setMaskOnes(i, row.length)
      this.#slots[i] = { key: row.key, length: row.length }
    })
  }

  /**
   * The staging tensor, with room for `floats` at least: grown to twice its size where that is
   * more (never past every slot's whole buffer), so the host holds only what loads have needed.
   */
  #stagingFor (floats: number): { tensor: Value; data: Float32Array } {
    if (this.#staging && this.#staging.data.length >= floats) return this.#staging
    const { numKvHeads: heads, headDim: dim } = this.model
    const size = Math.min(this.rows * heads * this.length * dim, Math.max(floats, 2 * (this.#staging?.data.length ?? 0)))
    if (this.#staging) this.#api.freeHost(this.#staging.tensor)
    this.#staging = null
    const tensor = this.#api.hostTensor('float', [size])
    this.#staging = { tensor, data: new Float32Array(tensor.view as ArrayBuffer) }
    return this.#staging
  }

  /** A slot no row takes: nothing held; it steps token 0 at position 0, its mask one position long. */
  #freeSlot (s: number): void {
    this.#slots[s] = null
    this.#ids[s] = 0n
    this.#positions[s] = 0n
    this.#setMaskOnes(s, 1)
  }

  /** Slot s's mask row: `ones` ones, then zeros (only what changed is written: a row is up to the whole context long). */
  #setMaskOnes (s: number, ones: number): void {
    const row = s * this.length
    const was = this.#maskOnes[s]
    if (ones > was) this.#mask.fill(1n, row + was, row + ones)
    else this.#mask.fill(0n, row + ones, row + was)
    this.#maskOnes[s] = ones
  }

  #check (): void {
    if (this.#closed) throw new Error('the captured step is closed')
  }
}
