// Writes a Llama / Qwen2 decoder as an ONNX graph with the standard
// decoder signature that onnx-community exports use:
//   input_ids, attention_mask, position_ids, past_key_values.N.key/value
//     -> logits, present.N.key/value
// plus one extra input: with the append cache (below), tokens_per_row [batch]
// (rows may carry different numbers of real tokens in one run, and the logits
// are each row's last real token's: packedRows below); otherwise the scalar
// num_logits_to_keep (0 = every position, n = the last n), so a server feeding
// a prompt skips the lm_head work for positions whose logits it would discard.
//
// Attention is written with plain opset-17 operators (no fused contrib
// attention), so an attention_mask with zeros anywhere, including left
// padding, is honoured exactly: batched rows can have different lengths.
//
// Two ways to hand the key/value cache back (`cache`):
//   concat (the onnx-community signature): present.N.key/value, the past with
//     this run's positions appended, [batch, kv heads, past + seq, head_dim];
//     chatd's own concat graphs (standard attention) also return cache_delta,
//     this run's positions of every layer in one tensor, [2 x layers, batch,
//     kv heads, seq, head_dim] (layer i's keys at 2i, values at 2i + 1): on a
//     GPU the engine keeps present.N.* in the GPU's memory and feeds them back
//     as they are, and cache_delta is the one small copy of the cache that comes
//     back to the host each run (one read back instead of one per layer);
//   append (chatd's default): new_key_values.N.key/value, only this run's
//     positions, [batch, kv heads, seq, head_dim]. The engine writes them into
//     cache buffers it keeps with room to spare, and feeds those buffers back
//     as the past with the unused slots masked out. onnxruntime-node copies
//     every output into a fresh JavaScript buffer, so returning the whole
//     cache each step costs a copy (and fresh pages) of all of it; returning
//     the new positions costs a few kilobytes.
// `attention: "gqa-masked"` (the form for GPU hosts) keeps those semantics with
// fewer nodes: rotary at position_ids and the same additive mask as plain
// attention, with attention's core in one com.microsoft GroupQueryAttention node
// that takes the mask as attention_bias and every row's whole length as its
// seqlens_k (so it derives no position and drops no key); left-padded rows stay
// exact, and a GPU runs ~17 kernels a layer instead of ~36 (each one costs host
// time to dispatch). Its int4 projections take their bias inside MatMulNBits.
//
// Compute is float32; `weights` picks how weights are stored (fp32, fp16 or
// int4 through com.microsoft MatMulNBits), and `io` the dtype of the KV cache
// and logits.
//
// `form: "onnx-community"` writes instead the form onnx-community / optimum
// exports have, which is what users who pick those files run: no
// num_logits_to_keep (logits for every position), the whole cache returned,
// separate q/k/v and gate/up projections, RMSNorm and rotary from plain
// operators, float32 embeddings, and MatMulNBits without accuracy_level (so
// onnxruntime computes in float32). The benchmark measures it beside chatd's
// own form, and tests check that chatd runs such graphs exactly.
import type { DecoderConfig } from './decoder-config.ts'
import { attr, GraphBuilder } from './graph-builder.ts'
import { DataType } from './onnx-proto.ts'
import { concat1d, concatRows, quantizeInt4, quantizeInt8, toFloat16Bytes, toFloat32Bytes, transpose2d, type Int8Weight, type Tensor } from './tensors.ts'

export type WeightFormat = 'fp32' | 'fp16' | 'int4' | 'int8'
export type AttentionStyle = 'standard' | 'gqa' | 'mha' | 'gqa-masked'
/** What the graph returns of the key/value cache (see the head of this file). */
export type CacheStyle = 'concat' | 'append'
/** chatd's own graph, or the form onnx-community exports have (see the head of this file). */
export type GraphForm = 'chatd' | 'onnx-community'
/** How int4 MatMulNBits computes: int8 activations (accuracy_level 4) or float32 (no accuracy_level). */
export type Int4Compute = 'int8' | 'float'

/** The cache style when none is asked for: append, except for gqa graphs, which return the whole cache. */
export function defaultCacheStyle (attention: AttentionStyle = 'standard'): CacheStyle {
  return attention === 'standard' ? 'append' : 'concat'
}

export interface WeightSource {
  has (name: string): boolean
  /** A float32 tensor in Hugging Face layout; throws when missing. */
  get (name: string): Tensor
}

export interface DecoderGraphOptions {
  weights: WeightFormat
  /** int8 (default): MatMulNBits accuracy_level 4, int8 activations (much faster on CPU); float: float32, as a GPU computes it. */
  int4Compute?: Int4Compute
  /** MatMulNBits block_size along K (default INT4_BLOCK_SIZE, 32). */
  int4BlockSize?: number
  /**
   * standard (default): attention from plain operators, exact under any mask.
   * gqa: com.microsoft GroupQueryAttention with built-in rotary, the style of
   * onnxruntime-genai exports (no position_ids; fp32/int4 only). Written so
   * chatd can test that it detects such graphs and batches them safely.
   */
  attention?: AttentionStyle
  /** append (default): only the new positions come back; concat: the whole cache (gqa is always concat). */
  cache?: CacheStyle
  /** chatd (default) or onnx-community (standard attention, concat cache, fp32 or int4 weights). */
  form?: GraphForm
  /**
   * gqa-masked only; false writes the GPU form for rows without padding: no mask (the operator is
   * causal by itself), and GroupQueryAttention rotating q and k itself from each layer's packed
   * projection at the positions its seqlens_k gives (unpaddedAttention, as the capture step). Exact
   * for rows without padding only, so chatd never serves such a file (its metadata names it
   * gqa-causal); written to measure what the provider's fused attention kernels would make of
   * every step (scripts/bench/gpu-forms.ts).
   */
  attentionBias?: boolean
  /**
   * gqa-masked only: the decode step as onnxruntime's WebGPU graph capture needs it (the capture
   * step, model_step.onnx). Every run then has the same shapes: one row without padding, one
   * token, its mask as long as the cache buffer (ones for the positions it holds and the new one,
   * zeros after), so seqlens_k comes from the mask's ones rather than its length, and
   * GroupQueryAttention takes no attention_bias (under capture onnxruntime 1.30 cannot check one
   * against a sequence length that is in GPU memory; for one unpadded row seqlens_k bounds the
   * keys); no num_logits_to_keep; cache_delta as the GPU form's (the step's new keys and values, one
   * position a layer: what keeps the host's copy of a captured row's cache). With no padding the
   * operator's own rotary is right (it rotates at seqlens_k), so each layer hands it the packed
   * q/k/v projection (unpaddedAttention). chatd serves such a file only as the capture step
   * (metadata gqa-static-decode): it is wrong for left-padded rows.
   */
  staticDecode?: boolean
}

const MS_DOMAIN = 'com.microsoft'

/** onnxruntime's GroupQueryAttention kernels take head sizes in multiples of this only. */
export const GQA_HEAD_SIZE_MULTIPLE = 16

/**
 * Throws when this shape cannot be written in this graph style; the converter
 * calls it before it writes anything, and buildDecoderGraph again.
 */
export function checkGraphOptions (cfg: DecoderConfig, opts: Pick<DecoderGraphOptions, 'weights' | 'attention' | 'cache' | 'form' | 'attentionBias' | 'staticDecode'> & { promptGraph?: boolean; captureStep?: boolean }, source = 'config.json'): void {
  // The prompt graph is an int8 graph with the main graph's inputs and outputs (a float32 cache).
  if (opts.promptGraph) {
    if (opts.weights === 'fp16') throw new Error('a prompt graph is written beside fp32, int4 or int8 weights only (its cache is float32)')
    checkGraphOptions(cfg, { ...opts, weights: 'int8', promptGraph: false }, source)
  }
  // int8 linears quantize each packed token's row: the graphs that pack rows only.
  if (opts.weights === 'int8' && ((opts.attention ?? 'standard') !== 'standard' || (opts.cache ?? defaultCacheStyle(opts.attention)) !== 'append' || opts.form === 'onnx-community')) {
    throw new Error('int8 weights are written with standard attention and the append cache only')
  }
  if (opts.attentionBias === false && opts.attention !== 'gqa-masked') throw new Error('only the gqa-masked attention style is written without its bias')
  if (opts.staticDecode && opts.attention !== 'gqa-masked') throw new Error('the static decode step is written in the gqa-masked attention style')
  if (opts.captureStep && opts.attention !== 'gqa-masked') throw new Error('the capture step (--capture-step) is written for the gqa-masked attention style (--for gpu)')
  if (opts.attention === 'gqa-masked') {
    if (opts.weights === 'fp16' || opts.weights === 'int8') throw new Error('the gqa-masked attention style is written for fp32 and int4 weights only')
    if ((opts.cache ?? defaultCacheStyle(opts.attention)) !== 'concat' || opts.form === 'onnx-community') throw new Error('the gqa-masked attention style is written in chatd\'s form with the concat cache only')
  } else if (opts.attention !== 'gqa') return
  if (opts.weights === 'fp16') throw new Error('the gqa attention style is written for fp32 and int4 weights only')
  if ((opts.cache ?? defaultCacheStyle(opts.attention)) !== 'concat') throw new Error('the gqa attention style returns the whole cache (cache concat)')
  if (cfg.headDim % GQA_HEAD_SIZE_MULTIPLE !== 0) {
    throw new Error(`--attention ${opts.attention} needs a head size that is a multiple of ${GQA_HEAD_SIZE_MULTIPLE} (onnxruntime's GroupQueryAttention takes no other), but ${source} gives head_dim ${cfg.headDim}; use --attention standard`)
  }
}

export function buildDecoderGraph (g: GraphBuilder, cfg: DecoderConfig, src: WeightSource, opts: DecoderGraphOptions): void {
  const ioType = opts.weights === 'fp16' ? DataType.FLOAT16 : DataType.FLOAT
  checkGraphOptions(cfg, opts)
  const plain = opts.form === 'onnx-community'
  const cache = plain ? 'concat' : opts.cache ?? defaultCacheStyle(opts.attention)
  if (opts.attention === 'mha' && (cfg.numKvHeads !== cfg.numHeads || opts.weights === 'fp16' || cache !== 'concat')) {
    // MultiHeadAttention keeps one cache head per query head and returns the whole cache.
    throw new Error('the mha attention style needs num_key_value_heads equal to num_attention_heads, fp32 or int4 weights, and the concat cache')
  }
  if (plain && (opts.attention === 'gqa' || opts.attention === 'mha' || opts.weights === 'fp16' || opts.cache === 'append')) {
    throw new Error('the onnx-community form is written with standard attention, the concat cache and fp32 or int4 weights')
  }
  const { numHeads: nH, numKvHeads: nKv, headDim: hd, hiddenSize: H } = cfg
  const masked = opts.attention === 'gqa-masked'
  // onnx-community q4 files carry no accuracy_level: onnxruntime then computes in float32.
  const accuracyLevel = plain || opts.int4Compute === 'float' ? undefined : 4

  // ---- inputs -------------------------------------------------------------
  const inputIds = g.input('input_ids', DataType.INT64, ['batch_size', 'sequence_length'])
  const attentionMask = g.input('attention_mask', DataType.INT64, ['batch_size', 'total_sequence_length'])
  // GroupQueryAttention graphs derive positions from the mask, as the graphs
  // onnxruntime's generator builds do, and take no position_ids.
  const positionIds = opts.attention === 'gqa' ? null : g.input('position_ids', DataType.INT64, ['batch_size', 'sequence_length'])
  const past: Array<{ key: string; value: string }> = []
  for (let i = 0; i < cfg.numLayers; i++) {
    past.push({
      key: g.input(`past_key_values.${i}.key`, ioType, ['batch_size', nKv, 'past_sequence_length', hd]),
      value: g.input(`past_key_values.${i}.value`, ioType, ['batch_size', nKv, 'past_sequence_length', hd]),
    })
  }
  // A required input: onnxruntime-node cannot override an initializer-backed
  // optional input (it only passes feeds named in session.inputNames).
  // Append-cache graphs take rows of different lengths in one run (packed rows, below) and return
  // each row's last token's logits; the others keep num_logits_to_keep (or, plain, every position's).
  const packed = cache === 'append' ? packedRows(g, inputIds, g.input('tokens_per_row', DataType.INT64, ['batch_size'])) : null
  const logitsToKeep = plain || packed || opts.staticDecode ? null : g.input('num_logits_to_keep', DataType.INT64, [])

  // ---- weight helpers -----------------------------------------------------
  /** y = x W^T (+ b) for HF Linear weights stacked by rows (fused projections). */
  const linear = (x: string, name: string, weights: Tensor[], bias: Float32Array | null): string => {
    const w = concatRows(weights)
    const [n, k] = w.shape
    let y: string
    if (opts.weights === 'int4') {
      const q = quantizeInt4(w, opts.int4BlockSize)
      const b = g.initializer(`${name}.qweight`, DataType.UINT8, [n, q.blocksPerRow, q.blockSize / 2], q.packed)
      const s = g.initializer(`${name}.scales`, DataType.FLOAT, [n * q.blocksPerRow], toFloat32Bytes(q.scales))
      // gqa-masked graphs (the GPU form) pass the bias to MatMulNBits' own bias input: one kernel, not two.
      const fusedBias = bias && masked ? g.initializer(`${name}.bias`, DataType.FLOAT, [bias.length], toFloat32Bytes(bias)) : null
      y = g.op('MatMulNBits', fusedBias ? [x, b, s, '', '', fusedBias] : [x, b, s], {
        K: attr.i(k),
        N: attr.i(n),
        bits: attr.i(4),
        block_size: attr.i(q.blockSize),
        ...(accuracyLevel === undefined ? {} : { accuracy_level: attr.i(accuracyLevel) }),
      }, { domain: MS_DOMAIN, name: `${name}/MatMulNBits` })
    } else if (opts.weights === 'int8') {
      y = int8Linear(g, x, name, quantizeInt8(w))
    } else {
      const wt = transpose2d(w)
      y = g.op('MatMul', [x, floatWeight(`${name}.weight`, wt)], {}, { name: `${name}/MatMul` })
    }
    if (bias && !(opts.weights === 'int4' && masked)) y = g.op('Add', [y, g.initializer(`${name}.bias`, DataType.FLOAT, [bias.length], toFloat32Bytes(bias))])
    return y
  }

  /** A float weight stored as fp32, or as fp16 widened once when the session loads. */
  const floatWeight = (name: string, t: Tensor): string => {
    if (opts.weights === 'fp16') {
      const half = g.initializer(`${name}_fp16`, DataType.FLOAT16, t.shape, toFloat16Bytes(t.data))
      return g.op('Cast', [half], { to: attr.i(DataType.FLOAT) }, { name: `${name}/Cast` })
    }
    return g.initializer(name, DataType.FLOAT, t.shape, toFloat32Bytes(t.data))
  }

  /**
   * RMSNorm of `residual + add`, fused with the residual addition: returns the
   * normalized value and the new residual stream. One com.microsoft
   * SkipSimplifiedLayerNormalization node (or SimplifiedLayerNormalization
   * when there is nothing to add) instead of seven small operators: a decode
   * step runs hundreds of nodes, and each costs scheduling time.
   */
  const addAndNorm = (residual: string, add: string | null, weightName: string): { normed: string; sum: string } => {
    const w = src.get(weightName)
    const gamma = g.initializer(weightName, DataType.FLOAT, w.shape, toFloat32Bytes(w.data))
    if (plain) {
      // x / sqrt(mean(x^2) + eps) * gamma, operator by operator, as exporters write it.
      const sum = add === null ? residual : g.op('Add', [residual, add])
      const meanSquare = g.op('ReduceMean', [g.op('Pow', [sum, g.float([2], true)])], { axes: attr.ints([-1]), keepdims: attr.i(1) })
      const inverse = g.op('Reciprocal', [g.op('Sqrt', [g.op('Add', [meanSquare, g.float([cfg.rmsNormEps], true)])])])
      return { normed: g.op('Mul', [g.op('Mul', [sum, inverse]), gamma]), sum }
    }
    const epsilon = attr.f(cfg.rmsNormEps)
    if (add === null) {
      return { normed: g.op('SimplifiedLayerNormalization', [residual, gamma], { epsilon, axis: attr.i(-1) }), sum: residual }
    }
    const id = `${weightName}/SkipSimplifiedLayerNormalization`
    const [normed, , , sum] = g.node('SkipSimplifiedLayerNormalization', [residual, add, gamma], { epsilon },
      { domain: MS_DOMAIN, name: id, outputs: [`${id}/out`, '', '', `${id}/sum`] })
    return { normed, sum }
  }

  const biasOf = (names: string[], enabled: boolean): Float32Array | null =>
    enabled ? concat1d(names.map(n => src.get(n).data)) : null

  // ---- attention ------------------------------------------------------------
  // chatd's concat graphs with plain attention collect each layer's new entries for cache_delta.
  // gqa-masked graphs collect the new entries as the projections give them ([B, S, kv heads * hd]).
  // Graphs for rows without padding (the static decode step, gqa-causal) hand each layer's packed
  // projection to GroupQueryAttention and build cache_delta themselves.
  const step = masked && (opts.staticDecode === true || opts.attentionBias === false) ? unpaddedAttention(g, cfg, attentionMask, positionIds as string) : null
  const newEntries: string[] | null = step === null && cache === 'concat' && !plain && ((opts.attention ?? 'standard') === 'standard' || masked) ? [] : null
  const attention: AttentionBuilder = step
    ? () => { throw new Error('graphs for rows without padding attend through unpaddedAttention') }
    : opts.attention === 'gqa'
      ? groupQueryAttention(g, cfg, attentionMask)
      : standardAttention(g, cfg, inputIds, attentionMask, positionIds as string, ioType, cache, plain, opts.attention === 'mha', packed !== null, newEntries, masked)

  // ---- embedding ----------------------------------------------------------
  const embed = src.get('model.embed_tokens.weight')
  let hidden: string
  if (opts.weights === 'fp32' || plain) {
    hidden = g.op('Gather', [g.initializer('model.embed_tokens.weight', DataType.FLOAT, embed.shape, toFloat32Bytes(embed.data)), packed?.ids ?? inputIds])
  } else {
    // Stored as fp16 and widened after the lookup, so the table stays half size in memory.
    const table = g.initializer('model.embed_tokens.weight_fp16', DataType.FLOAT16, embed.shape, toFloat16Bytes(embed.data))
    hidden = g.op('Cast', [g.op('Gather', [table, packed?.ids ?? inputIds])], { to: attr.i(DataType.FLOAT) })
  }

  // ---- layers -------------------------------------------------------------
  // The residual stream: `residual` plus the last block's output `pending`,
  // added inside the next norm.
  let residual = hidden
  let pending: string | null = null
  for (let i = 0; i < cfg.numLayers; i++) {
    const p = `model.layers.${i}`
    const a = `${p}.self_attn`
    const attnIn = addAndNorm(residual, pending, `${p}.input_layernorm.weight`)
    residual = attnIn.sum
    let merged: string
    if (plain) {
      const [qFlat, kFlat, vFlat] = ['q', 'k', 'v'].map(x =>
        linear(attnIn.normed, `${a}.${x}_proj`, [src.get(`${a}.${x}_proj.weight`)], biasOf([`${a}.${x}_proj.bias`], cfg.qkvBias)))
      merged = attention(i, qFlat, kFlat, vFlat, past[i])
    } else {
      const qkv = linear(attnIn.normed, `${a}.qkv_proj`,
        [src.get(`${a}.q_proj.weight`), src.get(`${a}.k_proj.weight`), src.get(`${a}.v_proj.weight`)],
        biasOf([`${a}.q_proj.bias`, `${a}.k_proj.bias`, `${a}.v_proj.bias`], cfg.qkvBias))
      if (step) {
        merged = step.layer(i, qkv, past[i])
      } else {
        // Packed rows: the projections ran on the real tokens only; attention takes them as padded rows.
        const [qFlat, kFlat, vFlat] = g.node('Split', [packed ? packed.toRows(qkv) : qkv, g.int64([nH * hd, nKv * hd, nKv * hd])], { axis: attr.i(-1) }, { outputs: 3 })
        merged = packed ? packed.toTokens(attention(i, qFlat, kFlat, vFlat, past[i])) : attention(i, qFlat, kFlat, vFlat, past[i])
      }
    }
    for (const kv of ['key', 'value']) {
      if (cache === 'append') g.output(`new_key_values.${i}.${kv}`, ioType, ['batch_size', nKv, 'sequence_length', hd])
      else g.output(`present.${i}.${kv}`, ioType, ['batch_size', nKv, 'total_sequence_length', hd])
    }
    const attnOut = linear(merged, `${a}.o_proj`, [src.get(`${a}.o_proj.weight`)], biasOf([`${a}.o_proj.bias`], cfg.oBias))

    const m = `${p}.mlp`
    const mlpIn = addAndNorm(residual, attnOut, `${p}.post_attention_layernorm.weight`)
    residual = mlpIn.sum
    let gate: string, up: string
    // The GPU form's int4 keeps gate and up apart: onnxruntime's WebGPU provider (MatMulNBitsMlpFusion)
    // then runs the norm, both projections and SiLU(gate) * up as one kernel, where one fused
    // projection, its Split and the activation's nodes cost five dispatches a layer.
    if (plain || (masked && opts.weights === 'int4')) {
      [gate, up] = ['gate', 'up'].map(x => linear(mlpIn.normed, `${m}.${x}_proj`, [src.get(`${m}.${x}_proj.weight`)], biasOf([`${m}.${x}_proj.bias`], cfg.mlpBias)))
    } else {
      const gateUp = linear(mlpIn.normed, `${m}.gate_up_proj`,
        [src.get(`${m}.gate_proj.weight`), src.get(`${m}.up_proj.weight`)],
        biasOf([`${m}.gate_proj.bias`, `${m}.up_proj.bias`], cfg.mlpBias))
      const I = cfg.intermediateSize
      ;[gate, up] = g.node('Split', [gateUp, g.int64([I, I])], { axis: attr.i(-1) }, { outputs: 2 })
    }
    const act = g.op('Mul', [g.op('Mul', [gate, g.op('Sigmoid', [gate])]), up])
    pending = linear(act, `${m}.down_proj`, [src.get(`${m}.down_proj.weight`)], biasOf([`${m}.down_proj.bias`], cfg.mlpBias))
  }

  // Every layer's keys then values side by side ([B, S, ...]), or each layer's apart (plain attention's [B, nKv, S, hd]).
  const sideBySide = step ? step.keysAndValues() : newEntries && masked ? g.op('Concat', newEntries, { axis: attr.i(-1) }) : null
  if (sideBySide) {
    // One reshape and transpose into the delta's layout: [B, S, 2L, nKv, hd] to [2L, B, nKv, S, hd].
    const split = g.op('Reshape', [sideBySide, g.int64([0, 0, 2 * cfg.numLayers, nKv, hd])])
    g.op('Transpose', [split], { perm: attr.ints([2, 0, 3, 1, 4]) }, { output: 'cache_delta' })
  } else if (newEntries) {
    g.op('Concat', newEntries.map(e => g.op('Unsqueeze', [e, g.int64([0])])), { axis: attr.i(0) }, { output: 'cache_delta' })
  }
  if (sideBySide || newEntries) g.output('cache_delta', ioType, [2 * cfg.numLayers, 'batch_size', nKv, 'sequence_length', hd])

  // ---- head -----------------------------------------------------------------
  const final = addAndNorm(residual, pending, 'model.norm.weight').normed
  // Without num_logits_to_keep (the onnx-community form), every position's logits.
  const kept = packed
    ? g.op('Gather', [final, packed.lastOfRow]) // [B, H]
    : logitsToKeep === null
      ? final
      : g.op('Slice', [final, g.op('Unsqueeze', [g.op('Neg', [logitsToKeep]), g.int64([0])]), g.int64([Number.MAX_SAFE_INTEGER]), g.int64([1])])
  const headWeight = cfg.tieWordEmbeddings || !src.has('lm_head.weight') ? embed : src.get('lm_head.weight')
  if (headWeight.shape[0] !== cfg.vocabSize || headWeight.shape[1] !== H) {
    throw new Error(`lm_head weight has shape [${headWeight.shape}], expected [${cfg.vocabSize}, ${H}]`)
  }
  const headOut = linear(kept, 'lm_head', [headWeight], null)
  const logits = packed ? g.op('Unsqueeze', [headOut, g.int64([1])]) : headOut // [B, 1, vocab] when packed
  if (ioType === DataType.FLOAT16) {
    g.op('Cast', [logits], { to: attr.i(DataType.FLOAT16) }, { output: 'logits' })
  } else {
    g.op('Identity', [logits], {}, { output: 'logits' })
  }
  g.output('logits', ioType, ['batch_size', 'logits_length', cfg.vocabSize])
}

/**
 * y = x W^T with int8 weights (per output feature) and int8 activations quantized per row here,
 * symmetric, as uint8 around onnxruntime's zero point 128: MatMulInteger's uint8 x int8 product is
 * exact in int32, and each row's scale is its own, so a token's result does not depend on which
 * other tokens share the run (batched equals solo, any chunking). onnxruntime's integer GEMM
 * (VNNI, AMX where the CPU has it) runs prompts several times faster than the int4 kernel.
 * (Exported for npm run bench:matmul.)
 */
export function int8Linear (g: GraphBuilder, x: string, name: string, q: Int8Weight): string {
  const n = q.scales.length
  const k = q.values.length / n
  const b = g.initializer(`${name}.qweight`, DataType.INT8, [k, n], new Uint8Array(q.values.buffer, q.values.byteOffset, q.values.byteLength))
  const columnScale = g.initializer(`${name}.scales`, DataType.FLOAT, [n], toFloat32Bytes(q.scales))
  // x is [rows, k] (packed tokens); each row's scale maps its largest |value| to 127.
  const amax = g.op('ReduceMax', [g.op('Abs', [x])], { axes: attr.ints([-1]), keepdims: attr.i(0) }) // [rows]
  // An all-zero row keeps a tiny scale instead of dividing by zero.
  const rowScale = g.op('Max', [g.op('Div', [amax, g.float([127], true)]), g.float([1e-30], true)])
  const zeroPoint = g.initializer(`${name}.activation_zero_point`, DataType.UINT8, [], Uint8Array.of(128))
  const rowZeroPoints = g.op('Expand', [zeroPoint, g.op('Shape', [rowScale])])
  const xq = g.op('QuantizeLinear', [x, rowScale, rowZeroPoints], { axis: attr.i(0) }) // round(x / scale) + 128, per row
  // The exact integer product times each column's scale, in the GEMM's own output stage; then each row's.
  const perColumn = g.op('MatMulIntegerToFloat', [xq, b, g.float([1], true), columnScale, zeroPoint], {}, { domain: MS_DOMAIN, name: `${name}/MatMulIntegerToFloat` })
  return g.op('Mul', [perColumn, g.op('Unsqueeze', [rowScale, g.int64([1])])])
}

type PastPair = { key: string; value: string }

/**
 * Packed rows: rows of one run may carry different numbers of new tokens (a decode row's one
 * beside a prompt chunk's several), each row's real tokens first in input_ids [B, S] and
 * `tokens_per_row` [B] saying how many. Everything but attention works on the real tokens alone,
 * packed as [N, hidden], so padding costs no weight work: a decode row riding in a prompt chunk's
 * run adds one token-row, not S. Attention gathers them back into rows (a padding slot repeats its
 * row's last real token; causality keeps real queries from seeing it, and its keys and values
 * are returned but never kept).
 */
interface PackedRows {
  /** The real tokens' ids, [N]. */
  ids: string
  /** [N, X] to [B, S, X]. */
  toRows: (tokens: string) => string
  /** [B * S, width] (rows flattened) to [N, width]. */
  toTokens: (rows: string) => string
  /** Each row's last real token's index in the packed tokens, [B]. */
  lastOfRow: string
}

function packedRows (g: GraphBuilder, inputIds: string, tokensPerRow: string): PackedRows {
  const seqLen = g.op('Gather', [g.op('Shape', [inputIds]), g.int64([1], true)], { axis: attr.i(0) })
  const slot = g.op('Range', [g.int64([0], true), seqLen, g.int64([1], true)]) // [S]
  const real = g.op('Less', [g.op('Unsqueeze', [slot, g.int64([0])]), g.op('Unsqueeze', [tokensPerRow, g.int64([1])])]) // [B, S]
  const realSlots = g.op('Reshape', [g.op('NonZero', [g.op('Reshape', [real, g.int64([-1])])]), g.int64([-1])]) // [N], into B*S
  const ends = g.op('CumSum', [tokensPerRow, g.int64([0], true)]) // [B], exclusive of the row's end
  const starts = g.op('Sub', [ends, tokensPerRow])
  // Slot (b, s) reads packed token starts[b] + min(s, tokens_per_row[b] - 1).
  const lastSlot = g.op('Unsqueeze', [g.op('Sub', [tokensPerRow, g.int64([1], true)]), g.int64([1])])
  const source = g.op('Add', [g.op('Unsqueeze', [starts, g.int64([1])]), g.op('Min', [g.op('Unsqueeze', [slot, g.int64([0])]), lastSlot])]) // [B, S]
  return {
    ids: g.op('Gather', [g.op('Reshape', [inputIds, g.int64([-1])]), realSlots]),
    toRows: tokens => g.op('Gather', [tokens, source], { axis: attr.i(0) }),
    toTokens: rows => g.op('Gather', [rows, realSlots], { axis: attr.i(0) }),
    lastOfRow: g.op('Sub', [ends, g.int64([1], true)]),
  }
}
/** Builds one layer's attention: flat q/k/v [B, S, heads*hd] in, merged heads [B, S, nH*hd] out, present.i.* written. */
type AttentionBuilder = (layer: number, q: string, k: string, v: string, past: PastPair) => string

function inverseFrequencies (cfg: DecoderConfig): Float32Array {
  const hd = cfg.headDim
  const inv = new Float32Array(hd / 2)
  for (let i = 0; i < hd / 2; i++) inv[i] = 1 / Math.pow(cfg.ropeTheta, (2 * i) / hd)
  return inv
}

/** cos and sin of every position in `positions` ([T], int64) times each rotary frequency: [T, hd/2] each. */
function rotaryTables (g: GraphBuilder, cfg: DecoderConfig, positions: string): { cos: string; sin: string } {
  const column = g.op('Unsqueeze', [g.op('Cast', [positions], { to: attr.i(DataType.FLOAT) }), g.int64([1])]) // [T, 1]
  const angles = g.op('Mul', [column, g.initializer('rotary.inv_freq', DataType.FLOAT, [cfg.headDim / 2], toFloat32Bytes(inverseFrequencies(cfg)))])
  return { cos: g.op('Cos', [angles]), sin: g.op('Sin', [angles]) }
}

function standardAttention (g: GraphBuilder, cfg: DecoderConfig, inputIds: string, attentionMask: string, positionIds: string, ioType: number, cache: CacheStyle,
  plainRotary: boolean, fusedMha = false, flatRows = false, newEntries: string[] | null = null, maskedGqa = false): AttentionBuilder {
  const { numHeads: nH, numKvHeads: nKv, headDim: hd } = cfg
  // ---- shared per-step tensors: mask bias and rotary tables ---------------
  const seqLen = g.op('Gather', [g.op('Shape', [inputIds]), g.int64([1], true)], { axis: attr.i(0) })
  const totalLen = g.op('Gather', [g.op('Shape', [attentionMask]), g.int64([1], true)], { axis: attr.i(0) })
  const pastLen = g.op('Sub', [totalLen, seqLen])
  const one = g.int64([1], true)
  const queryPos = g.op('Range', [pastLen, totalLen, one])
  const keyPos = g.op('Range', [g.int64([0], true), totalLen, one])
  // causal[s, t] = key t is not after query s
  const causal = g.op('LessOrEqual', [
    g.op('Unsqueeze', [keyPos, g.int64([0])]),
    g.op('Unsqueeze', [queryPos, g.int64([1])]),
  ])
  const keyPresent = g.op('Unsqueeze', [g.op('Cast', [attentionMask], { to: attr.i(DataType.BOOL) }), g.int64([1, 2])])
  const allowed = g.op('And', [causal, keyPresent]) // [B, 1, S, T]
  // The most negative float rather than -inf: a row with no allowed key (a
  // padding query) then softmaxes to a uniform row instead of NaN.
  const maskBias = g.op('Where', [allowed, g.float([0], true), g.float([-3.4028234663852886e38], true)])

  // Rotary tables for positions 0..T-1 (every row's positions are below T),
  // built once per step and shared by all layers' com.microsoft
  // RotaryEmbedding nodes, which rotate halves (rotate_half, not interleaved)
  // at each row's own position_ids.
  const { cos, sin } = rotaryTables(g, cfg, keyPos) // [T, hd/2]
  // Plain operators: each row's cos/sin gathered at its position_ids, then x1*cos - x2*sin and
  // x2*cos + x1*sin on the two halves of every head (rotate_half), as exporters write it.
  const cosAt = plainRotary ? g.op('Unsqueeze', [g.op('Gather', [cos, positionIds]), g.int64([2])]) : '' // [B, S, 1, hd/2]
  const sinAt = plainRotary ? g.op('Unsqueeze', [g.op('Gather', [sin, positionIds]), g.int64([2])]) : ''
  const rotary = (flat: string, heads: number): string => {
    if (!plainRotary) return g.op('RotaryEmbedding', [flat, positionIds, cos, sin], { interleaved: attr.i(0), num_heads: attr.i(heads) }, { domain: MS_DOMAIN })
    const [x1, x2] = g.node('Split', [g.op('Reshape', [flat, g.int64([0, 0, heads, hd])])], { axis: attr.i(-1) }, { outputs: 2 })
    const first = g.op('Sub', [g.op('Mul', [x1, cosAt]), g.op('Mul', [x2, sinAt])])
    const second = g.op('Add', [g.op('Mul', [x2, cosAt]), g.op('Mul', [x1, sinAt])])
    return g.op('Reshape', [g.op('Concat', [first, second], { axis: attr.i(-1) }), g.int64([0, 0, heads * hd])])
  }
  const toHeads = (t: string, heads: number): string =>
    g.op('Transpose', [g.op('Reshape', [t, g.int64([0, 0, heads, hd])])], { perm: attr.ints([0, 2, 1, 3]) })

  if (maskedGqa) {
    // com.microsoft GroupQueryAttention for attention's core alone (on a GPU a few fused kernels
    // instead of a dozen): q and k rotated here at each row's position_ids, every row's seqlens_k
    // the whole length (so the operator drops no key and derives no position), and padding and
    // causality from the same additive mask as above, as attention_bias. Exact with left padding.
    const lastPositions = g.op('Expand', [
      g.op('Sub', [totalLen, one]),
      g.op('Unsqueeze', [g.op('Gather', [g.op('Shape', [attentionMask]), g.int64([0], true)], { axis: attr.i(0) }), g.int64([0])]),
    ])
    const seqlensK = g.op('Cast', [lastPositions], { to: attr.i(DataType.INT32) })
    const totalLenI32 = g.op('Cast', [totalLen], { to: attr.i(DataType.INT32) })
    return (i, qFlat, kFlat, vFlat, past) => {
      const k = rotary(kFlat, nKv)
      newEntries?.push(k, vFlat)
      const inputs = [rotary(qFlat, nH), k, vFlat, past.key, past.value, seqlensK, totalLenI32]
      return g.node('GroupQueryAttention', [...inputs, '', '', '', maskBias], {
        num_heads: attr.i(nH), kv_num_heads: attr.i(nKv), scale: attr.f(1 / Math.sqrt(hd)), do_rotary: attr.i(0),
      }, { domain: MS_DOMAIN, outputs: [`layers.${i}.attention`, `present.${i}.key`, `present.${i}.value`] })[0]
    }
  }

  if (fusedMha) {
    // com.microsoft MultiHeadAttention, as transformer optimizers fuse attention: rotated q and k,
    // the padding mask as int32 [batch, total], causal by `unidirectional`; it concatenates the
    // past itself and returns the whole cache. (mha: test graphs for how chatd batches such files.)
    const keyPaddingMask = g.op('Cast', [attentionMask], { to: attr.i(DataType.INT32) })
    return (i, qFlat, kFlat, vFlat, past) => g.node('MultiHeadAttention', [
      rotary(qFlat, nH), rotary(kFlat, nKv), vFlat, '', keyPaddingMask, '', past.key, past.value,
    ], { num_heads: attr.i(nH), unidirectional: attr.i(1), scale: attr.f(1 / Math.sqrt(hd)) },
    { domain: MS_DOMAIN, outputs: [`layers.${i}.attention`, `present.${i}.key`, `present.${i}.value`] })[0]
  }

  return (i, qFlat, kFlat, vFlat, past) => {
    const q = toHeads(rotary(qFlat, nH), nH)
    // The cache holds rotated keys. With an fp16 cache the new entries are
    // rounded before use, so cached and uncached runs see the same values.
    // In the append style the new entries (in the cache's type) are outputs themselves.
    const cacheEntry = (x: string, kv: 'key' | 'value'): string => {
      const output = cache === 'append' ? { output: `new_key_values.${i}.${kv}` } : {}
      return ioType === DataType.FLOAT16
        ? g.op('Cast', [x], { to: attr.i(DataType.FLOAT16) }, output)
        : cache === 'append' ? g.op('Identity', [x], {}, output) : x
    }
    const k = cacheEntry(toHeads(rotary(kFlat, nKv), nKv), 'key')
    const v = cacheEntry(toHeads(vFlat, nKv), 'value')
    newEntries?.push(k, v)
    const whole = (pastKv: string, entry: string, kv: 'key' | 'value'): string => {
      const joined = g.op('Concat', [pastKv, entry], { axis: attr.i(2) }, cache === 'concat' ? { output: `present.${i}.${kv}` } : {})
      return ioType === DataType.FLOAT16 ? g.op('Cast', [joined], { to: attr.i(DataType.FLOAT) }) : joined
    }
    const context = groupedAttention(g, cfg, q, whole(past.key, k, 'key'), whole(past.value, v, 'value'), maskBias)
    // Packed graphs take the merged heads as [B * S, nH * hd] (no extra reshape before packing them).
    return g.op('Reshape', [g.op('Transpose', [context], { perm: attr.ints([0, 2, 1, 3]) }), g.int64(flatRows ? [-1, nH * hd] : [0, 0, nH * hd])])
  }
}

/**
 * Attention's core as the standard style writes it: q [B, nH, S, hd] against the whole keys and
 * values [B, nKv, T, hd] under an additive mask [B, 1, S, T]; returns [B, nH, S, hd]. Grouped-query
 * attention without copying the cache per query head: the query heads that share a kv head are
 * folded into its row axis. (Exported for npm run bench:attention.)
 */
export function groupedAttention (g: GraphBuilder, cfg: Pick<DecoderConfig, 'numHeads' | 'numKvHeads' | 'headDim'>, q: string, keys: string, values: string, maskBias: string): string {
  const { numHeads: nH, numKvHeads: nKv, headDim: hd } = cfg
  const qGrouped = g.op('Reshape', [g.op('Mul', [q, g.float([1 / Math.sqrt(hd)], true)]), g.int64([0, nKv, -1, hd])]) // [B, nKv, rep*S, hd]
  const scores = g.op('MatMul', [qGrouped, g.op('Transpose', [keys], { perm: attr.ints([0, 1, 3, 2]) })])
  const scoresPerHead = g.op('Reshape', [scores, g.int64([0, nH, -1, 0])]) // [B, nH, S, T]
  const probs = g.op('Softmax', [g.op('Add', [scoresPerHead, maskBias])], { axis: attr.i(-1) })
  const context = g.op('MatMul', [g.op('Reshape', [probs, g.int64([0, nKv, -1, 0])]), values]) // [B, nKv, rep*S, hd]
  return g.op('Reshape', [context, g.int64([0, nH, -1, hd])])
}

/** Attention for rows without padding: each layer's from its packed projection, and cache_delta's keys and values from all of them. */
interface StepAttention {
  /** One layer's attention from its packed q/k/v projection [B, S, (nH + 2 nKv) * hd]; merged heads out, present.i.* written. */
  layer: (layer: number, qkv: string, past: PastPair) => string
  /** Every layer's new keys (rotated) and values side by side, [B, S, L, 2 nKv, hd], once every layer is built. */
  keysAndValues: () => string
}

/**
 * Attention for rows without padding (the static decode step, DecoderGraphOptions.staticDecode, and
 * gqa-causal): each row's tokens from position 0, so GroupQueryAttention may derive the new tokens'
 * positions from seqlens_k and rotate q and k itself. Given the packed projection and a cache
 * buffer that is both past and present, onnxruntime's WebGPU provider then splits, rotates and
 * writes the new keys and values in one kernel (SplitPackedQKVWithRotaryEmbeddingAndCopyKV) where a
 * Split and two RotaryEmbedding nodes took three more. cache_delta wants the rotated keys, which the
 * operator keeps to itself: they are rotated again here for all layers at once (the projections
 * side by side, one RotaryEmbedding over every layer's key heads, at position_ids, on the same
 * tables), a handful of kernels for the step.
 */
function unpaddedAttention (g: GraphBuilder, cfg: DecoderConfig, attentionMask: string, positionIds: string): StepAttention {
  const { numHeads: nH, numKvHeads: nKv, headDim: hd, numLayers: L } = cfg
  const one = g.int64([1], true)
  const totalLen = g.op('Gather', [g.op('Shape', [attentionMask]), one], { axis: attr.i(0) })
  // The mask's ones say where each row ends (the static step's mask is as long as its buffers).
  const rowLengths = g.op('ReduceSum', [attentionMask, g.int64([1])], { keepdims: attr.i(0) }) // [B]
  const seqlensK = g.op('Cast', [g.op('Sub', [rowLengths, one])], { to: attr.i(DataType.INT32) })
  // total_sequence_length is the longest row's length, not the buffer's: under capture the provider
  // sizes the decode attention's dispatch from it on the GPU at every replay (each row's keys are
  // bounded by its seqlens_k), so a step reads the rows' keys, not the whole buffer's.
  const totalLenI32 = g.op('ReduceMax', [g.op('Cast', [rowLengths], { to: attr.i(DataType.INT32) })], { keepdims: attr.i(0) })
  // Rotary tables for positions 0..T-1, as the GPU form's (in the static step, fixed dimensions fold them into constants).
  const { cos, sin } = rotaryTables(g, cfg, g.op('Range', [g.int64([0], true), totalLen, one]))
  const projections: string[] = []
  return {
    layer: (i, qkv, past) => {
      projections.push(qkv)
      return g.node('GroupQueryAttention', [qkv, '', '', past.key, past.value, seqlensK, totalLenI32, cos, sin], {
        num_heads: attr.i(nH), kv_num_heads: attr.i(nKv), scale: attr.f(1 / Math.sqrt(hd)), do_rotary: attr.i(1), rotary_interleaved: attr.i(0),
      }, { domain: MS_DOMAIN, outputs: [`layers.${i}.attention`, `present.${i}.key`, `present.${i}.value`] })[0]
    },
    keysAndValues: () => {
      if (projections.length !== L) throw new Error(`cache_delta wants all ${L} layers' projections, has ${projections.length}`)
      // [B, S, L, nH + 2 nKv, hd]: each layer's heads, q's, then k's, then v's.
      const heads = g.op('Reshape', [g.op('Concat', projections, { axis: attr.i(-1) }), g.int64([0, 0, L, nH + 2 * nKv, hd])])
      const headsOf = (from: number): string => g.op('Slice', [heads, g.int64([from]), g.int64([from + nKv]), g.int64([3])])
      const keys = g.op('RotaryEmbedding', [g.op('Reshape', [headsOf(nH), g.int64([0, 0, L * nKv * hd])]), positionIds, cos, sin],
        { interleaved: attr.i(0), num_heads: attr.i(L * nKv) }, { domain: MS_DOMAIN })
      return g.op('Concat', [g.op('Reshape', [keys, g.int64([0, 0, L, nKv, hd])]), headsOf(nH + nKv)], { axis: attr.i(3) })
    },
  }
}

function groupQueryAttention (g: GraphBuilder, cfg: DecoderConfig, attentionMask: string): AttentionBuilder {
  const { numHeads: nH, numKvHeads: nKv, headDim: hd } = cfg
  // The operator's view of positions: each row's last position is its mask's sum minus one.
  const seqlensK = g.op('Cast', [g.op('Sub', [
    g.op('ReduceSum', [attentionMask, g.int64([1])], { keepdims: attr.i(0) }), g.int64([1], true),
  ])], { to: attr.i(DataType.INT32) })
  const totalLen = g.op('Cast', [g.op('Gather', [g.op('Shape', [attentionMask]), g.int64([1], true)], { axis: attr.i(0) })], { to: attr.i(DataType.INT32) })
  const inv = inverseFrequencies(cfg)
  const cosTable = new Float32Array(cfg.maxPositions * (hd / 2))
  const sinTable = new Float32Array(cfg.maxPositions * (hd / 2))
  for (let p = 0; p < cfg.maxPositions; p++) {
    for (let j = 0; j < hd / 2; j++) {
      const angle = Math.fround(p * inv[j])
      cosTable[p * (hd / 2) + j] = Math.cos(angle)
      sinTable[p * (hd / 2) + j] = Math.sin(angle)
    }
  }
  const cos = g.initializer('rotary.cos_cache', DataType.FLOAT, [cfg.maxPositions, hd / 2], toFloat32Bytes(cosTable))
  const sin = g.initializer('rotary.sin_cache', DataType.FLOAT, [cfg.maxPositions, hd / 2], toFloat32Bytes(sinTable))
  return (i, q, k, v, past) => g.node('GroupQueryAttention', [q, k, v, past.key, past.value, seqlensK, totalLen, cos, sin], {
    num_heads: attr.i(nH), kv_num_heads: attr.i(nKv), scale: attr.f(1 / Math.sqrt(hd)), do_rotary: attr.i(1), rotary_interleaved: attr.i(0),
  }, { domain: MS_DOMAIN, outputs: [`layers.${i}.attention`, `present.${i}.key`, `present.${i}.value`] })[0]
}

export const DECODER_OPSETS = [{ domain: '', version: 17 }, { domain: MS_DOMAIN, version: 1 }]
