// chatd's model builder: writes an onnx-community-style model directory
//   config.json, generation_config.json, tokenizer*.json, onnx/<file>.onnx (+ .onnx_data)
// from a Llama / Qwen2 safetensors checkpoint or from seeded random weights.
import fs from 'node:fs'
import path from 'node:path'
import { BYTE_TOKENIZER_BOS_ID, BYTE_TOKENIZER_EOS_ID, BYTE_TOKENIZER_SIZE, byteTokenizerFiles } from './byte-tokenizer.ts'
import { parseDecoderConfig } from './decoder-config.ts'
import { buildDecoderGraph, checkGraphOptions, DECODER_OPSETS, defaultCacheStyle, type AttentionStyle, type CacheStyle, type GraphForm, type Int4Compute, type WeightFormat, type WeightSource } from './decoder-graph.ts'
import { ExternalDataWriter, GraphBuilder } from './graph-builder.ts'
import { CAPTURE_STEP_FILE, PROMPT_GRAPH_FILE } from '../engine/onnx/model-dir.ts'
import { encodeModel } from './onnx-proto.ts'
import { INT4_BLOCK_SIZE } from './tensors.ts'
import { CheckpointWeights, expectedShapes, RandomWeights } from './weight-sources.ts'

/** File name of each weight format, as onnx-community names them. */
export const ONNX_FILE_BY_FORMAT: Record<WeightFormat, string> = {
  fp32: 'model.onnx',
  fp16: 'model_fp16.onnx',
  int4: 'model_q4.onnx',
  int8: 'model_int8.onnx',
}

const TOKENIZER_FILES = ['tokenizer.json', 'tokenizer_config.json', 'special_tokens_map.json']

/** How the graph is written, whatever the weights come from. */
export interface GraphOptions {
  weights: WeightFormat
  attention?: AttentionStyle
  /** append (default for standard attention): the graph returns only new cache positions; concat: the whole cache. */
  cache?: CacheStyle
  /** int4 only: MatMulNBits block size along K (default 32). */
  int4BlockSize?: number
  /**
   * int4 only: how MatMulNBits computes. int8 (default): activations quantized to int8
   * (accuracy_level 4, much faster on CPU); float: in float32 (no accuracy_level), which a GPU
   * computes as the CPU does, token for token.
   */
  int4Compute?: Int4Compute
  /** chatd (default), or the form onnx-community exports have (decoder-graph.ts). */
  form?: GraphForm
  /** Also write the int8 prompt graph (PROMPT_GRAPH_FILE); chatd's form only. */
  promptGraph?: boolean
  /** gqa-masked only: false writes it without the mask, for measuring (DecoderGraphOptions.attentionBias). */
  attentionBias?: boolean
  /** gqa-masked only: the decode step for graph capture, for measuring (DecoderGraphOptions.staticDecode). */
  staticDecode?: boolean
  /**
   * gqa-masked only: also write that step as onnx/model_step.onnx (CAPTURE_STEP_FILE), with weights
   * of its own, for the WebGPU device's captured decode (ONNX_WEBGPU_CAPTURE).
   */
  captureStep?: boolean
}

export interface ConvertResult {
  dir: string
  onnxFile: string
  seconds: number
}

/**
 * How many token ids a tokenizer.json hands out: its highest id, in the
 * vocabulary or among the added tokens, plus one.
 */
export function tokenizerSize (file: string): number {
  const tokenizer = readJson(file) as { model?: { vocab?: unknown }; added_tokens?: Array<{ id?: unknown }> }
  let highest = -1
  const vocab = tokenizer.model?.vocab
  if (Array.isArray(vocab)) {
    highest = vocab.length - 1 // Unigram: [piece, score] pairs, ids are positions
  } else if (typeof vocab === 'object' && vocab !== null) {
    for (const id of Object.values(vocab)) if (typeof id === 'number' && id > highest) highest = id
  }
  for (const token of tokenizer.added_tokens ?? []) if (typeof token.id === 'number' && token.id > highest) highest = token.id
  return highest + 1
}

/**
 * A tokenizer with ids the model has no output (and no embedding) for cannot
 * be run: refused before anything is written, naming both numbers.
 */
function checkTokenizerFits (tokenizerFile: string, cfg: ReturnType<typeof parseDecoderConfig>, configSource: string): void {
  if (!fs.existsSync(tokenizerFile)) return // reported as missing where the files are copied
  const size = tokenizerSize(tokenizerFile)
  if (size > cfg.vocabSize) {
    throw new Error(`${tokenizerFile} has ${size} tokens (ids 0 to ${size - 1}), more than the vocab_size ${cfg.vocabSize} of ${configSource}: the model has no embedding or logit for ids ${cfg.vocabSize} and above; use the tokenizer that belongs to this config, or a config whose vocab_size is at least ${size}`)
  }
}

export function convertCheckpoint (opts: GraphOptions & {
  from: string
  out: string
  /** Told after each weight tensor is read: how many of how many. */
  onProgress?: (tensors: number, total: number) => void
}): ConvertResult {
  const started = performance.now()
  const rawConfig = readJson(path.join(opts.from, 'config.json'))
  const cfg = parseDecoderConfig(rawConfig, path.join(opts.from, 'config.json'))
  checkGraphOptions(cfg, opts, path.join(opts.from, 'config.json'))
  checkTokenizerFits(path.join(opts.from, 'tokenizer.json'), cfg, path.join(opts.from, 'config.json'))
  const checkpoint = new CheckpointWeights(opts.from, cfg)
  const source = opts.onProgress ? counted(checkpoint, expectedShapes(cfg).size, (opts.promptGraph ? 2 : 1) + (opts.captureStep ? 1 : 0), opts.onProgress) : checkpoint
  try {
    fs.mkdirSync(path.join(opts.out, 'onnx'), { recursive: true })
    for (const file of ['config.json', 'generation_config.json', ...TOKENIZER_FILES]) {
      const from = path.join(opts.from, file)
      if (fs.existsSync(from)) copyWritable(from, path.join(opts.out, file))
    }
    for (const required of ['tokenizer.json', 'tokenizer_config.json']) {
      if (!fs.existsSync(path.join(opts.out, required))) throw new Error(`${opts.from}: missing ${required}`)
    }
    if (!fs.existsSync(path.join(opts.out, 'generation_config.json'))) {
      writeJson(path.join(opts.out, 'generation_config.json'), { bos_token_id: rawConfig.bos_token_id, eos_token_id: rawConfig.eos_token_id })
    }
    const onnxFile = writeOnnx(opts.out, cfg, source, opts, { source: 'checkpoint' })
    return { dir: opts.out, onnxFile, seconds: (performance.now() - started) / 1000 }
  } finally {
    checkpoint.close()
  }
}

/**
 * A weight source that reports each tensor read, over `passes` graphs written from it (two with a
 * prompt graph): a tensor asked for again once all have been read starts the next pass.
 */
function counted (source: WeightSource, perPass: number, passes: number, onProgress: (tensors: number, total: number) => void): WeightSource {
  const seen = new Set<string>()
  let done = 0
  return {
    has: name => source.has(name),
    get: name => {
      const tensor = source.get(name)
      if (seen.has(name) && seen.size >= perPass && done < passes - 1) {
        done++
        seen.clear()
      }
      seen.add(name)
      onProgress(done * perPass + Math.min(seen.size, perPass), perPass * passes)
      return tensor
    },
  }
}

export function convertRandom (opts: GraphOptions & { configPath: string; out: string; seed: number; tokenizerDir?: string }): ConvertResult {
  const started = performance.now()
  const rawConfig = readJson(opts.configPath)
  // Everything that can be refused is, before anything is written.
  const shape = parseDecoderConfig(rawConfig, opts.configPath)
  checkGraphOptions(shape, opts, opts.configPath)
  if (opts.tokenizerDir) {
    checkTokenizerFits(path.join(opts.tokenizerDir, 'tokenizer.json'), shape, opts.configPath)
  } else if (shape.vocabSize < BYTE_TOKENIZER_SIZE) {
    throw new Error(`${opts.configPath}: vocab_size ${shape.vocabSize} is smaller than the generated tokenizer (${BYTE_TOKENIZER_SIZE} tokens)`)
  }
  fs.mkdirSync(path.join(opts.out, 'onnx'), { recursive: true })
  let bos = rawConfig.bos_token_id
  let eos = rawConfig.eos_token_id
  if (opts.tokenizerDir) {
    for (const file of TOKENIZER_FILES) {
      const from = path.join(opts.tokenizerDir, file)
      if (fs.existsSync(from)) copyWritable(from, path.join(opts.out, file))
      else if (file !== 'special_tokens_map.json') throw new Error(`${opts.tokenizerDir}: missing ${file}`)
    }
    const genConfig = path.join(opts.tokenizerDir, 'generation_config.json')
    if (fs.existsSync(genConfig)) {
      const gen = readJson(genConfig)
      bos = gen.bos_token_id ?? bos
      eos = gen.eos_token_id ?? eos
    }
  } else {
    for (const [file, content] of Object.entries(byteTokenizerFiles())) writeJson(path.join(opts.out, file), content)
    bos = BYTE_TOKENIZER_BOS_ID
    eos = BYTE_TOKENIZER_EOS_ID
  }
  const config = { ...rawConfig, bos_token_id: bos, eos_token_id: eos }
  const cfg = parseDecoderConfig(config, opts.configPath)
  writeJson(path.join(opts.out, 'config.json'), config)
  writeJson(path.join(opts.out, 'generation_config.json'), { bos_token_id: bos, eos_token_id: eos })
  const source = new RandomWeights(cfg, opts.seed, typeof rawConfig.initializer_range === 'number' ? rawConfig.initializer_range : 0.02)
  const onnxFile = writeOnnx(opts.out, cfg, source, opts, { source: 'random', seed: String(opts.seed) })
  return { dir: opts.out, onnxFile, seconds: (performance.now() - started) / 1000 }
}

/**
 * Writes onnx/<file>.onnx and its .onnx_data (and, with `promptGraph`, the prompt graph beside
 * them; with `captureStep`, the static decode step); each file appears under its final name only
 * when complete. Returns the main graph's path.
 */
export function writeOnnx (out: string, cfg: ReturnType<typeof parseDecoderConfig>, source: WeightSource, graph: GraphOptions, meta: Record<string, string>): string {
  const { weights, attention = 'standard', int4BlockSize, int4Compute, form = 'chatd', attentionBias, staticDecode } = graph
  const cache = form === 'onnx-community' ? 'concat' : graph.cache ?? defaultCacheStyle(attention)
  const modelPath = writeGraph(out, ONNX_FILE_BY_FORMAT[weights], cfg, source, { weights, attention, int4BlockSize, int4Compute, cache, form, attentionBias, staticDecode }, meta)
  if (graph.promptGraph) writeGraph(out, PROMPT_GRAPH_FILE, cfg, source, { weights: 'int8', attention, cache, form }, { ...meta, role: 'prompt' })
  if (graph.captureStep) writeGraph(out, CAPTURE_STEP_FILE, cfg, source, { weights, attention, int4BlockSize, int4Compute, cache, form, staticDecode: true }, { ...meta, role: 'capture-step' })
  return modelPath
}

function writeGraph (out: string, fileName: string, cfg: ReturnType<typeof parseDecoderConfig>, source: WeightSource,
  opts: { weights: WeightFormat; attention: AttentionStyle; int4BlockSize?: number; int4Compute?: Int4Compute; cache: CacheStyle; form: GraphForm; attentionBias?: boolean; staticDecode?: boolean }, meta: Record<string, string>): string {
  const modelPath = path.join(out, 'onnx', fileName)
  const dataName = `${fileName}_data`
  const dataPath = path.join(out, 'onnx', dataName)
  const external = new ExternalDataWriter(`${dataPath}.partial`, dataName)
  let bytes: Uint8Array
  try {
    const g = new GraphBuilder(external)
    buildDecoderGraph(g, cfg, source, opts)
    const blockMeta: Record<string, string> = opts.weights === 'int4' ? { 'chatd.int4_block_size': String(opts.int4BlockSize ?? INT4_BLOCK_SIZE), 'chatd.int4_compute': opts.int4Compute ?? 'int8' } : {}
    bytes = encodeModel(g.build(DECODER_OPSETS, { 'chatd.weights': opts.weights, 'chatd.model_type': cfg.modelType, 'chatd.attention': opts.attentionBias === false ? 'gqa-causal' : opts.staticDecode ? 'gqa-static-decode' : opts.attention, 'chatd.cache': opts.cache, 'chatd.form': opts.form, ...blockMeta, ...prefixKeys(meta) }))
  } finally {
    external.close()
  }
  fs.writeFileSync(`${modelPath}.partial`, bytes)
  fs.renameSync(`${dataPath}.partial`, dataPath)
  fs.renameSync(`${modelPath}.partial`, modelPath)
  return modelPath
}

function prefixKeys (meta: Record<string, string>): Record<string, string> {
  return Object.fromEntries(Object.entries(meta).map(([k, v]) => [`chatd.${k}`, v]))
}

/** A checkpoint's or a random model's config.json, read and checked (decoder-config.ts). */
export function readDecoderConfig (file: string): ReturnType<typeof parseDecoderConfig> {
  return parseDecoderConfig(readJson(file), file)
}

function readJson (file: string): Record<string, unknown> {
  let text: string
  try {
    text = fs.readFileSync(file, 'utf8')
  } catch {
    throw new Error(`${file}: cannot be read`)
  }
  try {
    return JSON.parse(text)
  } catch (err) {
    throw new Error(`${file}: invalid JSON (${(err as Error).message})`)
  }
}

function writeJson (file: string, value: unknown): void {
  fs.writeFileSync(file, JSON.stringify(value, null, 2) + '\n')
}

/** Copies a file without its mode: sources may be read-only, outputs get rebuilt. */
function copyWritable (from: string, to: string): void {
  fs.writeFileSync(to, fs.readFileSync(from))
}
