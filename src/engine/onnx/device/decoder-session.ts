// One ONNX decoder session with the inputs and outputs discovered from the
// graph itself: input_ids, attention_mask, optional position_ids and
// num_logits_to_keep, past_key_values.N.key/value -> logits and either
// present.N.key/value (the whole cache: the onnx-community signature) or
// new_key_values.N.key/value (only this run's positions: graphs chatd convert
// writes), with float32 or float16 caches and logits. kv-cache.ts keeps the
// cache between runs in the way each of the two needs. A concat graph written
// by chatd convert also returns cache_delta (this run's positions of every
// layer in one tensor): on WebGPU its present.N.* then stay in GPU memory and go
// back in as the next run's past as they are, and the small cache_delta is all
// of the cache that comes back to the host (cache/device-cache.ts keeps it).
//
// Graphs from elsewhere differ in ways that change the answer if ignored:
// without num_logits_to_keep, logits come back for every position fed (the
// last one of each row is the one to sample from); without position_ids, the
// graph derives positions itself, so rows cannot be padded. A graph with an
// input or output chatd does not know how to feed or read is refused at load,
// never run on a guess.
import fs from 'node:fs'
import type { ModelDir } from '../model-dir.ts'
import { ModelDirError } from '../model-dir.ts'
import { float16BitsToFloat32, freeTensor, ort, type OrtTensor } from './ort.ts'
import { GpuBuffers } from './gpu-buffers.ts'
import { createSession, DeviceError, type Device, type LoadedSession, type SessionSettings } from './providers.ts'

export type CacheType = 'float32' | 'float16'

/**
 * standard: attention from plain operators; any attention_mask (left padding included) is exact.
 * gqa: com.microsoft GroupQueryAttention, which derives positions from the mask's row sums and so
 * computes wrong results for left-padded rows.
 * mha: com.microsoft MultiHeadAttention; how it treats padding depends on how the exporter wired
 * the mask, so chatd does not pad its rows either.
 * gqa-masked: chatd's GPU form (chatd convert --attention gqa-masked): GroupQueryAttention under
 * an explicit mask with positions from position_ids, as exact as standard for any mask.
 */
export type GraphStyle = 'standard' | 'gqa' | 'mha' | 'gqa-masked'

/** Whether a graph's attention is onnxruntime's GroupQueryAttention (onnxruntime-genai's graphs, and chatd's GPU form). */
export function usesGroupQueryAttention (style: GraphStyle): boolean {
  return style === 'gqa' || style === 'gqa-masked'
}

/**
 * concat: present.N.* outputs hold the past with the new positions appended.
 * append: new_key_values.N.* outputs hold only the new positions.
 */
export type CacheOutputs = 'concat' | 'append'

/** A sequence batch's key/value cache: one key and one value tensor per layer. */
export interface KvCache {
  /** past_key_values.N.key/value feeds, [batch, kvHeads, length, headDim]. */
  tensors: Record<string, OrtTensor>
  length: number
}

export interface ForwardInput {
  batch: number
  /** [batch, seqLen] token ids. */
  inputIds: number[][]
  /**
   * [batch, past + seqLen]: 1 for real tokens, 0 for padding. The layouts give int64 rows
   * (filled, not converted number by number: at an agent's 8,000 positions and 8 rows, numbers
   * made a step several milliseconds slower).
   */
  attentionMask: Array<number[] | BigInt64Array>
  /** [batch, seqLen] positions. */
  positionIds: number[][]
  past: KvCache
  /** Compute logits for the last N positions only (0 = all), where the graph allows. */
  logitsToKeep: number
  /**
   * Every token fed is a prompt token: the run goes to the prompt graph where one is loaded
   * (`hasPromptGraph`). Generated tokens always run on the main graph, so which graph computed a
   * position depends only on what the token is, never on what shares its run.
   */
  prompt?: boolean
  /**
   * Graphs that pack rows (`packsRows`): each row's count of real tokens, which come first in its
   * inputIds row; the rest is padding. Default: every row is whole. The logits are then each
   * row's last real token's.
   */
  tokensPerRow?: number[]
}

export interface ForwardOutput {
  /** Float32 logits, [batch, rows, vocab]. */
  logits: Float32Array
  rows: number
  /**
   * Keyed by the past_key_values.N.* names. concat graphs: the whole cache after this run
   * (length past + seqLen), in GPU memory when `cacheOnDevice`. append graphs: this run's
   * positions only (length seqLen).
   */
  present: KvCache
  /**
   * With `cacheOnDevice`: this run's positions of each past_key_values.N.* on the host,
   * [batch, kvHeads, seqLen, headDim] each (views of one cache_delta tensor).
   */
  newEntries?: Record<string, Float32Array | Uint16Array>
}

/** The inputs chatd knows how to feed. */
const KNOWN_INPUT = /^(input_ids|attention_mask|position_ids|num_logits_to_keep|tokens_per_row|past_key_values\.\d+\.(key|value))$/

/**
 * A cache_delta's entries by cache name, as views of `data`: [2 x layers, batch, kvHeads, seqLen,
 * headDim], layer i's keys at 2i, its values at 2i + 1.
 */
export function cacheDeltaEntries<T extends Float32Array | Uint16Array> (data: T, numLayers: number): Record<string, T> {
  const each = data.length / (2 * numLayers)
  const entries: Record<string, T> = {}
  for (let i = 0; i < numLayers; i++) {
    entries[`past_key_values.${i}.key`] = data.subarray(2 * i * each, (2 * i + 1) * each) as T
    entries[`past_key_values.${i}.value`] = data.subarray((2 * i + 1) * each, (2 * i + 2) * each) as T
  }
  return entries
}

export class DecoderSession {
  readonly model: ModelDir
  readonly device: Device
  /** Why the session runs on `device` (providers.ts). */
  readonly deviceWhy: string
  /** WebGPU on a software Vulkan renderer (no GPU device on the machine). */
  readonly softwareRenderer: boolean
  /**
   * present.N.* come back as GPU buffers and are fed back as they are; the host gets each run's
   * new positions from cache_delta. WebGPU with a concat graph that has cache_delta.
   */
  readonly cacheOnDevice: boolean
  /**
   * With cacheOnDevice, gqa-masked graphs keep their cache in place: each layer's keys and values
   * are one GPU buffer with room for more positions (gpuBuffers makes them), given to a run as its
   * past and as its present.N.* (preallocated outputs), and GroupQueryAttention writes the run's
   * positions into it instead of copying the whole cache into a new buffer every run.
   */
  readonly cacheInPlace: boolean
  readonly cacheType: CacheType
  readonly hasPositionIds: boolean
  /** The graph takes num_logits_to_keep; without it, logits come back for every position fed (unless it packs rows). */
  readonly hasLogitsToKeep: boolean
  /**
   * The graph takes tokens_per_row (chatd's own append-cache graphs): rows of one run may carry
   * different numbers of real tokens, and only real tokens cost weight work, so decode rows can
   * ride in a prompt chunk's run. It returns each row's last real token's logits.
   */
  readonly packsRows: boolean
  readonly graphStyle: GraphStyle
  readonly cacheOutputs: CacheOutputs
  /** The names of the cache outputs: present.N.* (concat) or new_key_values.N.* (append). */
  readonly #cacheOutputPrefix: 'present' | 'new_key_values'
  readonly #session: ort.InferenceSession
  /** The graph returns cache_delta beside present.N.*. */
  readonly #hasCacheDelta: boolean
  /** The outputs each run fetches. */
  readonly #fetches: string[]
  #gpuBuffers: Promise<GpuBuffers> | null = null
  /** The prompt graph's session (model_prompt.onnx), on the CPU only; null without one. */
  #promptSession: ort.InferenceSession | null = null

  private constructor (model: ModelDir, loaded: LoadedSession, graphStyle: GraphStyle) {
    const session = loaded.session
    this.model = model
    this.#session = session
    this.device = loaded.device
    this.softwareRenderer = loaded.softwareRenderer
    this.deviceWhy = loaded.why
    this.graphStyle = graphStyle
    const inputs = new Map(session.inputMetadata.map(m => [m.name, m]))
    const outputs = new Set(session.outputNames)
    const where = model.onnxPath
    for (const name of ['input_ids', 'attention_mask']) {
      if (!inputs.has(name)) throw new ModelDirError(`${where}: graph has no ${name} input (inputs: ${session.inputNames.join(', ')})`)
    }
    for (const name of session.inputNames) {
      if (!KNOWN_INPUT.test(name)) {
        throw new ModelDirError(`${where}: graph input ${name} is not one chatd can feed (it feeds input_ids, attention_mask, position_ids, num_logits_to_keep, tokens_per_row and past_key_values.N.key/value)`)
      }
    }
    if (!outputs.has('logits')) throw new ModelDirError(`${where}: graph has no logits output`)
    const logitsInfo = session.outputMetadata.find(m => m.name === 'logits')
    if (logitsInfo?.isTensor) {
      const width = logitsInfo.shape[logitsInfo.shape.length - 1]
      if (logitsInfo.shape.length !== 3) throw new ModelDirError(`${where}: logits output has ${logitsInfo.shape.length} dimensions, expected [batch, positions, vocab]`)
      if (typeof width === 'number' && width !== model.vocabSize) {
        throw new ModelDirError(`${where}: logits output is ${width} wide but config.json says vocab_size ${model.vocabSize}`)
      }
    }
    const pastLayers = session.inputNames.filter(n => /^past_key_values\.\d+\.key$/.test(n)).length
    if (pastLayers !== model.numLayers) {
      throw new ModelDirError(`${where}: graph has ${pastLayers} past_key_values layers but config.json says num_hidden_layers ${model.numLayers}`)
    }
    const firstPast = inputs.get('past_key_values.0.key')
    if (!firstPast || !firstPast.isTensor) throw new ModelDirError(`${where}: past_key_values.0.key is not a tensor input`)
    if (firstPast.type !== 'float32' && firstPast.type !== 'float16') {
      throw new ModelDirError(`${where}: cache type ${firstPast.type} is not supported (float32 or float16)`)
    }
    this.cacheType = firstPast.type
    const [, kvHeads, , headDim] = firstPast.shape
    if ((typeof kvHeads === 'number' && kvHeads !== model.numKvHeads) || (typeof headDim === 'number' && headDim !== model.headDim)) {
      throw new ModelDirError(`${where}: cache shape [batch, ${kvHeads}, past, ${headDim}] does not match config.json (num_key_value_heads ${model.numKvHeads}, head_dim ${model.headDim})`)
    }
    if (outputs.has('present.0.key')) this.cacheOutputs = 'concat'
    else if (outputs.has('new_key_values.0.key')) this.cacheOutputs = 'append'
    else throw new ModelDirError(`${where}: unknown cache layout: the graph returns neither present.N.key/value (the whole cache) nor new_key_values.N.key/value (new positions); outputs: ${session.outputNames.join(', ')}`)
    this.#cacheOutputPrefix = this.cacheOutputs === 'concat' ? 'present' : 'new_key_values'
    this.hasPositionIds = inputs.has('position_ids')
    this.hasLogitsToKeep = inputs.has('num_logits_to_keep')
    this.packsRows = inputs.has('tokens_per_row')
    if (this.packsRows && (this.cacheOutputs !== 'append' || graphStyle !== 'standard')) {
      throw new ModelDirError(`${where}: tokens_per_row is understood only in graphs with plain attention that return new_key_values.N.*`)
    }
    if (this.cacheOutputs === 'append' && graphStyle === 'gqa') throw new ModelDirError(`${where}: a GroupQueryAttention graph must return present.N.key/value`)
    // Spare cache slots are masked out and every row's positions come from position_ids; a graph
    // that derives positions from the mask would count the slots wrong.
    if (this.cacheOutputs === 'append' && !this.hasPositionIds) throw new ModelDirError(`${where}: a graph that returns new_key_values.N.* must take position_ids`)
    if (usesGroupQueryAttention(graphStyle) && model.headDim % 16 !== 0) {
      throw new ModelDirError(`${where}: GroupQueryAttention needs a head size that is a multiple of 16 (onnxruntime's kernel); config.json gives head_dim ${model.headDim}`)
    }
    for (let i = 0; i < model.numLayers; i++) {
      for (const kv of ['key', 'value']) {
        if (!inputs.has(`past_key_values.${i}.${kv}`)) throw new ModelDirError(`${where}: graph has no past_key_values.${i}.${kv} input`)
        const output = `${this.#cacheOutputPrefix}.${i}.${kv}`
        if (!outputs.has(output)) throw new ModelDirError(`${where}: graph has no ${output} output`)
      }
    }
    this.#hasCacheDelta = this.cacheOutputs === 'concat' && outputs.has(CACHE_DELTA)
    // load() asks for present.N.* in GPU memory when the file names cache_delta; only the outputs can say it returns it.
    if (loaded.outputsOnDevice.length > 0 && !this.#hasCacheDelta) {
      throw new ModelDirError(`${where}: the graph mentions ${CACHE_DELTA} but does not return it beside present.N.key/value; rebuild it with chatd convert --cache concat`)
    }
    this.cacheOnDevice = loaded.outputsOnDevice.length > 0
    // The session was opened for it (#open): a run must then be given its present.N.* buffers.
    this.cacheInPlace = loaded.outputsPreallocated
    // Without cacheOnDevice, cache_delta duplicates what present holds: not fetched.
    this.#fetches = session.outputNames.filter(name => name !== CACHE_DELTA || this.cacheOnDevice)
  }

  /**
   * Whether rows of different lengths can share a run: they are padded, so the graph must take
   * each row's positions (position_ids) and honour any attention mask (plain attention, not
   * GroupQueryAttention that derives positions from the mask's row sums; chatd's gqa-masked
   * graphs are exact).
   */
  get takesPaddedRows (): boolean {
    return (this.graphStyle === 'standard' || this.graphStyle === 'gqa-masked') && this.hasPositionIds
  }

  /**
   * Whether rows of one run may take several tokens each on top of a cached past. onnxruntime's
   * GroupQueryAttention takes such a run (a prompt chunk after the first, or after a cached
   * prefix) one row at a time, so gqa-masked graphs prefill one sequence per run, but for whole
   * prompts on an empty cache (the engine's #prefillPlan); their decode steps (one token a row)
   * still batch.
   */
  get batchesPromptChunks (): boolean {
    return this.graphStyle !== 'gqa-masked'
  }

  /**
   * Most tokens one run may feed a row. On a software Vulkan renderer (Mesa's lavapipe, where the
   * tests run), onnxruntime's WebGPU GroupQueryAttention parts from the CPU's results from 32 new
   * tokens a run on (by 4e-2 in the logits; 1e-6 below 32), so GroupQueryAttention graphs (gqa-masked,
   * and onnxruntime-genai's gqa, whose greedy tokens then differed from the CPU's) feed prompts
   * there 31 tokens a run. On a GPU (an NVIDIA H200, measured) a 128-token run agrees with the CPU
   * as the plain-attention graph does (4.6e-5), and 31-token runs would cost 3.6x the prompt time.
   */
  get tokensPerRunLimit (): number {
    return usesGroupQueryAttention(this.graphStyle) && this.softwareRenderer ? GQA_SOFTWARE_EXACT_TOKENS : Infinity
  }

  static async load (model: ModelDir, settings: SessionSettings & { promptGraph?: boolean }): Promise<DecoderSession> {
    const main = await DecoderSession.#open(model, model.onnxPath, settings)
    const refused = await main.#refusedByWebgpu()
    if (refused !== null) {
      await main.close()
      throw new ModelDirError(`${model.onnxPath}: ${refused}; serve this model on the CPU ("device": "cpu" in models.json, or ONNX_DEVICE=cpu)`)
    }
    // The int8 prompt graph runs on onnxruntime's CPU integer kernels; on a GPU the main graph does all.
    if (!model.promptOnnxPath || settings.promptGraph === false || main.device !== 'cpu') return main
    try {
      const promptSettings = { ...settings, device: 'cpu' as const, profilePrefix: settings.profilePrefix && `${settings.profilePrefix}-prompt` }
      const prompt = await DecoderSession.#open({ ...model, onnxPath: model.promptOnnxPath }, model.promptOnnxPath, promptSettings)
      main.#attachPrompt(prompt)
    } catch (err) {
      await main.close()
      throw err
    }
    return main
  }

  /**
   * A graph whose operators onnxruntime's WebGPU provider loads but cannot run: found by one
   * one-token run at load rather than by the first request. Only MultiHeadAttention graphs are tried
   * (the provider does not implement its key_padding_mask input, which transformer optimizers wire);
   * chatd's own forms run there, as the WebGPU tests show. Returns why, or null.
   */
  async #refusedByWebgpu (): Promise<string | null> {
    if (this.device !== 'webgpu' || this.graphStyle !== 'mha') return null
    const past = this.emptyCache(1)
    try {
      const out = await this.forward({ batch: 1, inputIds: [[0]], attentionMask: [[1]], positionIds: [[0]], past, logitsToKeep: 1 })
      DecoderSession.disposeCache(out.present)
      return null
    } catch (err) {
      return `its MultiHeadAttention does not run on WebGPU (onnxruntime: ${(err as Error).message.split('\n')[0]})`
    } finally {
      DecoderSession.disposeCache(past)
    }
  }

  static async #open (model: ModelDir, file: string, settings: SessionSettings): Promise<DecoderSession> {
    const scan = scanGraph(file)
    // A concat graph with cache_delta keeps its cache in GPU memory (used only if the session runs on
    // WebGPU); a gqa-masked one in place, in buffers each run is given (cacheInPlace).
    const deviceOutputs = scan.cacheDelta && scan.present
      ? Array.from({ length: model.numLayers }, (_, i) => [`present.${i}.key`, `present.${i}.value`]).flat()
      : undefined
    let loaded
    try {
      loaded = await createSession(file, { ...settings, deviceOutputs, deviceOutputsPreallocated: scan.style === 'gqa-masked' })
    } catch (err) {
      if (err instanceof DeviceError) throw err
      throw new ModelDirError(`${file}: onnxruntime cannot load it: ${(err as Error).message}`)
    }
    try {
      return new DecoderSession(model, loaded, scan.style)
    } catch (err) {
      await loaded.session.release()
      throw err
    }
  }

  /** Takes over a prompt graph's session; its signature must be the main graph's, or it is refused. */
  #attachPrompt (prompt: DecoderSession): void {
    const signature = (s: DecoderSession): string => JSON.stringify([
      s.graphStyle, s.cacheOutputs, s.cacheType, s.hasPositionIds, s.hasLogitsToKeep, s.packsRows,
    ])
    if (signature(prompt) !== signature(this)) {
      void prompt.close()
      throw new ModelDirError(`${prompt.model.onnxPath}: the prompt graph's inputs and outputs differ from ${this.model.onnxPath}'s; rebuild both with one chatd convert --prompt-graph, or remove it`)
    }
    this.#promptSession = prompt.#session
  }

  /** Prompt tokens run on the int8 prompt graph (model_prompt.onnx). */
  get hasPromptGraph (): boolean {
    return this.#promptSession !== null
  }

  /** Stops onnxruntime's profiler (sessions loaded with `profilePrefix`) and writes its trace file. */
  endProfiling (): void {
    this.#session.endProfiling()
    this.#promptSession?.endProfiling()
  }

  /** An empty cache for `batch` rows. */
  emptyCache (batch: number): KvCache {
    const tensors: Record<string, OrtTensor> = {}
    const dims = [batch, this.model.numKvHeads, 0, this.model.headDim]
    for (let i = 0; i < this.model.numLayers; i++) {
      for (const kv of ['key', 'value']) {
        tensors[`past_key_values.${i}.${kv}`] = this.cacheType === 'float16'
          ? new ort.Tensor('float16', new Uint16Array(0), dims)
          : new ort.Tensor('float32', new Float32Array(0), dims)
      }
    }
    return { tensors, length: 0 }
  }

  async forward (input: ForwardInput): Promise<ForwardOutput> {
    const { batch } = input
    const seqLen = input.inputIds[0].length
    if (!this.packsRows && input.tokensPerRow?.some(n => n !== seqLen)) {
      throw new Error(`${this.model.onnxPath}: rows of different lengths in one run need a graph that packs rows (tokens_per_row)`)
    }
    const totalLen = input.past.length + seqLen
    const feeds: Record<string, OrtTensor> = {
      input_ids: int64Tensor(input.inputIds, [batch, seqLen]),
      attention_mask: int64Tensor(input.attentionMask, [batch, totalLen]),
      ...input.past.tensors,
    }
    if (this.hasPositionIds) feeds.position_ids = int64Tensor(input.positionIds, [batch, seqLen])
    if (this.hasLogitsToKeep) feeds.num_logits_to_keep = new ort.Tensor('int64', BigInt64Array.of(BigInt(input.logitsToKeep)), [])
    if (this.packsRows) {
      feeds.tokens_per_row = new ort.Tensor('int64', BigInt64Array.from(input.tokensPerRow ?? input.inputIds.map(() => seqLen), BigInt), [batch])
    }
    const out = input.prompt && this.#promptSession
      ? await this.#promptSession.run(feeds)
      : await this.#session.run(feeds, this.cacheInPlace ? this.#inPlaceFetches(input.past, totalLen) : this.#fetches)
    const logitsTensor = out.logits
    const [, positions, vocab] = logitsTensor.dims
    // Graphs without num_logits_to_keep return every position's logits: keep the last ones of each row.
    const rows = input.logitsToKeep > 0 ? Math.min(input.logitsToKeep, positions) : positions
    const kept = rows === positions
      ? logitsTensor.data as Float32Array | Uint16Array
      : lastPositions(logitsTensor.data as Float32Array | Uint16Array, batch, positions, rows, vocab)
    const logits = logitsTensor.type === 'float16' ? float16BitsToFloat32(kept as Uint16Array) : kept as Float32Array
    const prefix = this.#cacheOutputPrefix
    const present: KvCache = { tensors: {}, length: this.cacheOutputs === 'append' ? seqLen : totalLen }
    // In place, present.N.* are the past's own buffers, now holding this run's positions too.
    if (this.cacheInPlace) present.tensors = input.past.tensors
    else {
      for (let i = 0; i < this.model.numLayers; i++) {
        present.tensors[`past_key_values.${i}.key`] = out[`${prefix}.${i}.key`]
        present.tensors[`past_key_values.${i}.value`] = out[`${prefix}.${i}.value`]
      }
    }
    logitsTensor.dispose()
    if (!this.cacheOnDevice) return { logits, rows, present }
    const newEntries = cacheDeltaEntries(out[CACHE_DELTA].data as Float32Array | Uint16Array, this.model.numLayers)
    return { logits, rows, present, newEntries }
  }

  /** A run's outputs when the cache is kept in place: present.N.* are the past's buffers, which must have room for the run. */
  #inPlaceFetches (past: KvCache, totalLen: number): Record<string, OrtTensor | null> {
    const fetches: Record<string, OrtTensor | null> = { logits: null, [CACHE_DELTA]: null }
    for (const [name, tensor] of Object.entries(past.tensors)) {
      if (tensor.location !== 'gpu-buffer' || tensor.dims[2] < totalLen) throw new Error(`${this.model.onnxPath}: a cache kept in place needs GPU buffers with room for ${totalLen} positions (${name} has ${tensor.dims[2]}, ${tensor.location})`)
      fetches[name.replace('past_key_values', 'present')] = tensor
    }
    return fetches
  }

  /** The GPU buffers of caches kept in place (cacheInPlace), made on first use (tried again after a failure). */
  async gpuBuffers (): Promise<GpuBuffers> {
    if (!this.cacheInPlace) throw new Error(`${this.model.onnxPath}: only a cache kept in place has GPU buffers made for it`)
    this.#gpuBuffers ??= GpuBuffers.open().catch(err => {
      this.#gpuBuffers = null
      throw err
    })
    return await this.#gpuBuffers
  }

  /** Frees a cache that no step will read again (its memory at once, see freeTensor). */
  static disposeCache (cache: KvCache): void {
    for (const t of Object.values(cache.tensors)) freeTensor(t)
  }

  async close (): Promise<void> {
    const buffers = this.#gpuBuffers
    this.#gpuBuffers = null
    await (await buffers?.catch(() => null))?.close()
    await this.#session.release()
    await this.#promptSession?.release()
    this.#promptSession = null
  }
}

/** The most new tokens a run of a gqa-masked graph takes on a software renderer and stays exact (tokensPerRunLimit). */
export const GQA_SOFTWARE_EXACT_TOKENS = 31

/** The output that carries a run's new cache positions of every layer beside present.N.* (concat graphs chatd writes). */
export const CACHE_DELTA = 'cache_delta'

/**
 * What a graph file is, found without decoding it: its attention style (the fused operators'
 * names) and whether it returns present.N.* and cache_delta. Op types and value names are
 * stored as plain strings in the protobuf; scanning bytes avoids decoding a graph that may
 * carry gigabytes of inline weights.
 */
export function scanGraph (onnxPath: string): { style: GraphStyle; present: boolean; cacheDelta: boolean } {
  // The converter's metadata names the gqa-masked style (chatd.attention); a file without it that
  // has GroupQueryAttention is taken as deriving positions from the mask.
  // gqa-causal files (the converter's measuring form, GroupQueryAttention without the mask) are wrong
  // for padded rows, and so are gqa-static-decode files (the decode step for graph capture).
  const needles = ['GroupQueryAttention', 'MultiHeadAttention', 'present.0.key', CACHE_DELTA, 'gqa-masked', 'gqa-causal', 'gqa-static-decode'].map(n => Buffer.from(n))
  const found = new Set<number>()
  const longest = Math.max(...needles.map(n => n.length))
  const fd = fs.openSync(onnxPath, 'r')
  try {
    const chunk = Buffer.alloc(1 << 22)
    let position = 0
    let carry = Buffer.alloc(0)
    for (;;) {
      const read = fs.readSync(fd, chunk, 0, chunk.length, position)
      if (read === 0) break
      const window = Buffer.concat([carry, chunk.subarray(0, read)])
      needles.forEach((needle, k) => { if (window.includes(needle)) found.add(k) })
      carry = window.subarray(Math.max(0, window.length - longest + 1))
      position += read
    }
  } finally {
    fs.closeSync(fd)
  }
  for (const [needle, what] of [[5, 'a gqa-causal graph (attention without its mask)'], [6, 'a gqa-static-decode graph (the decode step for graph capture)']] as const) {
    if (found.has(needle)) throw new ModelDirError(`${onnxPath}: ${what} is written for measuring only and gives wrong tokens for padded rows; convert the model again without that option`)
  }
  const style: GraphStyle = found.has(0) ? (found.has(4) ? 'gqa-masked' : 'gqa') : found.has(1) ? 'mha' : 'standard'
  return { style, present: found.has(2), cacheDelta: found.has(3) }
}

/** The last `keep` positions of each row of [batch, positions, vocab] logits. */
function lastPositions<T extends Float32Array | Uint16Array> (data: T, batch: number, positions: number, keep: number, vocab: number): T {
  const out = new (data.constructor as new (n: number) => T)(batch * keep * vocab)
  for (let b = 0; b < batch; b++) {
    const from = (b * positions + positions - keep) * vocab
    out.set(data.subarray(from, from + keep * vocab), b * keep * vocab)
  }
  return out
}

function int64Tensor (rows: Array<number[] | BigInt64Array>, dims: number[]): OrtTensor {
  const data = new BigInt64Array(dims[0] * dims[1])
  let k = 0
  for (const row of rows) {
    if (row instanceof BigInt64Array) {
      data.set(row, k)
      k += row.length
    } else {
      for (const v of row) data[k++] = BigInt(v)
    }
  }
  return new ort.Tensor('int64', data, dims)
}

/** An attention mask row of `width` positions: ones, with zeros over [zeroFrom, zeroTo). */
export function maskRow (width: number, zeroFrom = 0, zeroTo = 0): BigInt64Array {
  return new BigInt64Array(width).fill(1n).fill(0n, zeroFrom, zeroTo)
}
