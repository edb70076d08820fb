// Reads and checks a model directory in the Hugging Face / onnx-community layout:
//   config.json, generation_config.json, tokenizer.json, tokenizer_config.json,
//   onnx/model*.onnx (+ external data such as model_q4.onnx_data).
// Every problem is reported with the file it concerns.
import fs from 'node:fs'
import path from 'node:path'
import { positiveIntegers } from './config-fields.ts'

export const MODEL_DTYPES = ['fp32', 'fp16', 'int8', 'q4', 'q4f16'] as const
export type ModelDtype = typeof MODEL_DTYPES[number]
/** The dtype of a local model whose models.json entry names none. */
export const DEFAULT_DTYPE: ModelDtype = 'q4'

/** ONNX file names tried for each dtype, in order (onnx-community's naming). */
export const ONNX_FILES_BY_DTYPE: Record<ModelDtype, string[]> = {
  fp32: ['model.onnx'],
  fp16: ['model_fp16.onnx'],
  int8: ['model_int8.onnx', 'model_quantized.onnx'],
  q4: ['model_q4.onnx'],
  q4f16: ['model_q4f16.onnx'],
}

/**
 * The prompt graph, beside the dtype's file: the same decoder with int8 weights (`chatd convert
 * --prompt-graph`, and `chatd pull` for the default model). Prompt tokens run on it, generated
 * tokens on the dtype's graph (decoder-session.ts).
 */
export const PROMPT_GRAPH_FILE = 'model_prompt.onnx'

/**
 * The static decode step, beside a gqa-masked graph (`chatd convert --capture-step`): one row, one
 * token, the cache a fixed length, the same shapes every run, which the WebGPU device records once
 * and replays for a request decoding alone (ONNX_WEBGPU_CAPTURE; device/captured-step.ts).
 */
export const CAPTURE_STEP_FILE = 'model_step.onnx'

export interface ModelDir {
  dir: string
  dtype: ModelDtype
  onnxPath: string
  /** onnx/model_prompt.onnx when the directory has one (its external data checked), else null. */
  promptOnnxPath: string | null
  /** onnx/model_step.onnx when the directory has one (its external data checked), else null. */
  stepOnnxPath: string | null
  numLayers: number
  /** Attention (query) heads. */
  numHeads: number
  numKvHeads: number
  headDim: number
  /** Logits width of the graph (may exceed the tokenizer's real vocabulary). */
  vocabSize: number
  /**
   * Prompt plus generated tokens may not exceed this: the smaller of config.json's
   * max_position_embeddings and tokenizer_config.json's model_max_length (what the model was
   * trained for; R1 distills say 131072 and 16384). models.json `contextLength` and the KV cache
   * budget may lower it further (engine.ts).
   */
  contextLength: number
  bosTokenId: number | null
  /** Every id that ends generation. */
  eosTokenIds: number[]
}

export class ModelDirError extends Error {
  constructor (message: string) {
    super(message)
    this.name = 'ModelDirError'
  }
}

export function readModelDir (dir: string, dtype: ModelDtype = DEFAULT_DTYPE): ModelDir {
  if (!MODEL_DTYPES.includes(dtype)) {
    throw new ModelDirError(`unknown dtype ${JSON.stringify(dtype)}: use one of ${MODEL_DTYPES.join(', ')}`)
  }
  if (!fs.existsSync(dir) || !fs.statSync(dir).isDirectory()) throw new ModelDirError(`${dir}: model directory not found`)
  const config = readJson(path.join(dir, 'config.json'))
  for (const file of ['tokenizer.json', 'tokenizer_config.json']) {
    if (!fs.existsSync(path.join(dir, file))) throw new ModelDirError(`${path.join(dir, file)}: file missing`)
  }
  const generationPath = path.join(dir, 'generation_config.json')
  const generation = fs.existsSync(generationPath) ? readJson(generationPath) : {}

  const candidates = ONNX_FILES_BY_DTYPE[dtype].map(f => path.join(dir, 'onnx', f))
  const onnxPath = candidates.find(f => fs.existsSync(f))
  if (!onnxPath) {
    throw new ModelDirError(`${candidates[0]}: file missing (dtype ${dtype}); present in ${path.join(dir, 'onnx')}: ${listOnnx(dir)}`)
  }
  checkExternalData(onnxPath)
  const promptOnnxPath = graphBeside(dir, PROMPT_GRAPH_FILE)
  const stepOnnxPath = graphBeside(dir, CAPTURE_STEP_FILE)

  const configPath = path.join(dir, 'config.json')
  const int = positiveIntegers(config, configPath, message => new ModelDirError(message))
  const tokenizerConfig = readJson(path.join(dir, 'tokenizer_config.json'))
  const hidden = int('hidden_size')
  const heads = int('num_attention_heads')
  const eos = generation.eos_token_id ?? config.eos_token_id
  const eosTokenIds = (Array.isArray(eos) ? eos : [eos]).filter((v): v is number => Number.isInteger(v))
  const bos = generation.bos_token_id ?? config.bos_token_id
  return {
    dir,
    dtype,
    onnxPath,
    promptOnnxPath,
    stepOnnxPath,
    numLayers: int('num_hidden_layers'),
    numHeads: heads,
    numKvHeads: int('num_key_value_heads', heads),
    headDim: int('head_dim', hidden / heads),
    vocabSize: int('vocab_size'),
    contextLength: Math.min(int('max_position_embeddings', 2048), trainedLength(tokenizerConfig.model_max_length)),
    bosTokenId: Number.isInteger(bos) ? bos as number : null,
    eosTokenIds,
  }
}

/**
 * tokenizer_config.json's model_max_length, when it says something: transformers writes a huge
 * sentinel (about 1e30) for tokenizers that set none.
 */
function trainedLength (value: unknown): number {
  return typeof value === 'number' && Number.isInteger(value) && value > 0 && value < 1e9 ? value : Infinity
}

/** onnx/`file` when the directory has it (its external data checked), else null. */
function graphBeside (dir: string, file: string): string | null {
  const graph = path.join(dir, 'onnx', file)
  if (!fs.existsSync(graph)) return null
  checkExternalData(graph)
  return graph
}

/** External data files named by onnx-community's convention must be present beside the graph. */
function checkExternalData (onnxPath: string): void {
  const size = fs.statSync(onnxPath).size
  if (size === 0) throw new ModelDirError(`${onnxPath}: file is empty`)
  // Graphs over 2 GiB keep their weights in <file>_data or <file>.data; a
  // small graph file whose sibling data file is missing cannot load.
  const dataFiles = [`${onnxPath}_data`, `${onnxPath}.data`]
  const fd = fs.openSync(onnxPath, 'r')
  try {
    const head = Buffer.alloc(Math.min(size, 1 << 20))
    fs.readSync(fd, head, 0, head.length, 0)
    for (const dataFile of dataFiles) {
      const name = path.basename(dataFile)
      if (head.includes(Buffer.from(name)) && !fs.existsSync(dataFile)) {
        throw new ModelDirError(`${dataFile}: external data file missing (referenced by ${onnxPath})`)
      }
    }
  } finally {
    fs.closeSync(fd)
  }
}

function listOnnx (dir: string): string {
  const onnxDir = path.join(dir, 'onnx')
  if (!fs.existsSync(onnxDir)) return '(no onnx directory)'
  const files = fs.readdirSync(onnxDir).filter(f => f.endsWith('.onnx'))
  return files.length > 0 ? files.join(', ') : '(no .onnx files)'
}

function readJson (file: string): Record<string, any> {
  let text: string
  try {
    text = fs.readFileSync(file, 'utf8')
  } catch {
    throw new ModelDirError(`${file}: file missing or unreadable`)
  }
  try {
    const value = JSON.parse(text)
    if (value === null || typeof value !== 'object' || Array.isArray(value)) throw new Error('not an object')
    return value
  } catch (err) {
    throw new ModelDirError(`${file}: invalid JSON (${(err as Error).message})`)
  }
}
