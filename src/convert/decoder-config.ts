// The architecture facts the graph builder needs, read from a Hugging Face
// config.json of a Llama or Qwen2 checkpoint.
import { positiveIntegers } from '../engine/onnx/config-fields.ts'

export interface DecoderConfig {
  modelType: 'llama' | 'qwen2'
  hiddenSize: number
  intermediateSize: number
  numLayers: number
  numHeads: number
  numKvHeads: number
  headDim: number
  vocabSize: number
  rmsNormEps: number
  ropeTheta: number
  maxPositions: number
  tieWordEmbeddings: boolean
  /** q/k/v projections carry biases (always for Qwen2; `attention_bias` for Llama). */
  qkvBias: boolean
  /** o_proj carries a bias (Llama's `attention_bias`). */
  oBias: boolean
  mlpBias: boolean
}

type Json = Record<string, unknown>

export function parseDecoderConfig (raw: Json, source = 'config.json'): DecoderConfig {
  const modelType = raw.model_type
  if (modelType !== 'llama' && modelType !== 'qwen2') {
    throw new Error(`${source}: model_type ${JSON.stringify(modelType)} is not supported (llama or qwen2)`)
  }
  const int = positiveIntegers(raw, source)
  const num = (key: string, fallback: number): number => {
    const v = raw[key] ?? fallback
    if (typeof v !== 'number' || !Number.isFinite(v) || v <= 0) {
      throw new Error(`${source}: ${key} must be a positive number (got ${JSON.stringify(raw[key])})`)
    }
    return v
  }
  const hiddenSize = int('hidden_size')
  const numHeads = int('num_attention_heads')
  const numKvHeads = int('num_key_value_heads', numHeads)
  const headDim = int('head_dim', hiddenSize / numHeads)
  if (numHeads % numKvHeads !== 0) {
    throw new Error(`${source}: num_attention_heads (${numHeads}) must be a multiple of num_key_value_heads (${numKvHeads})`)
  }
  if (headDim % 2 !== 0) throw new Error(`${source}: head_dim (${headDim}) must be even for rotary embeddings`)
  const ropeScaling = raw.rope_scaling as Json | null | undefined
  if (ropeScaling && (ropeScaling.rope_type ?? ropeScaling.type) !== 'default') {
    throw new Error(`${source}: rope_scaling ${JSON.stringify(ropeScaling)} is not supported`)
  }
  if (raw.hidden_act !== undefined && raw.hidden_act !== 'silu') {
    throw new Error(`${source}: hidden_act ${JSON.stringify(raw.hidden_act)} is not supported (silu)`)
  }
  const attentionBias = raw.attention_bias === true
  return {
    modelType,
    hiddenSize,
    intermediateSize: int('intermediate_size'),
    numLayers: int('num_hidden_layers'),
    numHeads,
    numKvHeads,
    headDim,
    vocabSize: int('vocab_size'),
    rmsNormEps: num('rms_norm_eps', 1e-6),
    ropeTheta: num('rope_theta', 10000),
    maxPositions: int('max_position_embeddings', 2048),
    tieWordEmbeddings: raw.tie_word_embeddings === true,
    qkvBias: modelType === 'qwen2' || attentionBias,
    oBias: modelType === 'llama' && attentionBias,
    mlpBias: raw.mlp_bias === true,
  }
}
