// `chatd convert`: the model builder's command line.
//   chatd convert --from <hf-checkpoint-dir> --out <dir> [--dtype fp32|fp16|int4|int8] [--prompt-graph]
//   chatd convert --random <config.json> --out <dir> [--seed N] [--dtype ...] [--tokenizer <dir>] [--prompt-graph]
//   either with --for cpu|gpu: the form chatd pull writes for that device (model-forms.ts)
import { join } from 'node:path'
import { parseArgs } from 'node:util'
import type { AttentionStyle, CacheStyle, Int4Compute, WeightFormat } from './decoder-graph.ts'
import { convertCheckpoint, convertRandom, readDecoderConfig, type ConvertResult, type GraphOptions } from './index.ts'
import { INT4_BLOCK_SIZES } from './tensors.ts'
import { formOptions, MODEL_FORMS, type ModelForm } from './model-forms.ts'

export const CONVERT_USAGE = `Usage:
  chatd convert --from <hf-checkpoint-dir> --out <dir> [--dtype fp32|fp16|int4|int8]
  chatd convert --random <config.json> --out <dir> [--seed N] [--dtype fp32|fp16|int4|int8] [--tokenizer <dir>]
  either form also takes --attention standard|gqa|mha|gqa-masked (default standard),
  --cache append|concat (default append; gqa, mha and gqa-masked are always concat),
  --prompt-graph (standard attention and the append cache only),
  and, with int4, --block-size 16|32|64|128|256 (default 32) and --int4-compute int8|float (default int8);
  or, in place of those, --for cpu|gpu: the form chatd pull writes for that device;
  with the GPU form, --capture-step also writes onnx/model_step.onnx

--for cpu: int4 with int8 activations, the append cache and (int4) the int8 prompt graph,
the fastest on a CPU. --for gpu: the concat cache, int4 computed in float32, and
--attention gqa-masked where the head size is a multiple of 16 (standard otherwise):
the form for ONNX_DEVICE=webgpu.

Writes an onnx-community-style model directory (config.json, tokenizer files,
onnx/model.onnx | model_fp16.onnx | model_q4.onnx with external data) from a
Llama or Qwen2 safetensors checkpoint, or from seeded random weights in the
shape a config.json describes. Without --tokenizer a random model gets a small
byte-level tokenizer. The default dtype is int4 (onnx dtype q4). --attention mha writes attention as
com.microsoft MultiHeadAttention (models whose kv heads equal their heads; fp32 and int4), the way
transformer optimizers fuse it. --attention gqa writes attention as
com.microsoft GroupQueryAttention (the onnxruntime-genai style; fp32 and int4),
which chatd decodes one sequence per run because it cannot take padded rows.
--attention gqa-masked (with --cache concat) keeps plain attention's exact
padding with GroupQueryAttention as attention's core under an explicit mask:
fewer nodes, the form for GPU hosts (head sizes that are multiples of 16).
--cache concat writes the onnx-community signature (present.N.key/value: the
whole cache, returned every run); append, the default, returns only the new
positions (new_key_values.N.key/value), which chatd writes into cache buffers it
keeps, saving a copy of the whole cache per step. Other runtimes expect concat.
chatd's concat graphs also return cache_delta, so that on a GPU (ONNX_DEVICE=webgpu)
the cache stays in the GPU's memory between steps: --cache concat is the form
for GPU hosts.
--block-size sets how many weights share one int4 scale: 32 is what onnx-community
q4 exports and llama.cpp's Q4_0 use; 128 reads ~15% fewer bytes per token and
runs faster on CPU, at some cost in precision. --int4-compute float has int4
matrix products computed in float32 instead of with int8 activations: slower on
a CPU, and what a GPU computes, so the CPU and a GPU give the same tokens.
--dtype int8 writes int8 weights
(one scale per output feature, activations quantized per token: onnxruntime's
integer matrix multiply). --prompt-graph also writes onnx/model_prompt.onnx, the
same model with int8 weights, which chatd runs prompts on (several times faster
than int4 on a CPU) while generated tokens run on the main graph.
--capture-step also writes onnx/model_step.onnx, the GPU form's decode step with
fixed shapes (one row, one token, the cache a fixed length) and weights of its own,
which ONNX_WEBGPU_CAPTURE has the WebGPU device record once and replay for a request
decoding alone.`

const FORMATS: WeightFormat[] = ['fp32', 'fp16', 'int4', 'int8']

export class ConvertUsageError extends Error {}

export function runConvert (args: string[]): ConvertResult {
  let values
  try {
    values = parseArgs({
      args,
      options: {
        from: { type: 'string' },
        random: { type: 'string' },
        out: { type: 'string' },
        dtype: { type: 'string', default: 'int4' },
        seed: { type: 'string', default: '0' },
        tokenizer: { type: 'string' },
        attention: { type: 'string' },
        for: { type: 'string' },
        cache: { type: 'string' },
        'block-size': { type: 'string' },
        'int4-compute': { type: 'string' },
        'prompt-graph': { type: 'boolean', default: false },
        'capture-step': { type: 'boolean', default: false },
      },
      strict: true,
    }).values
  } catch (err) {
    throw new ConvertUsageError((err as Error).message)
  }
  const weights = (values.dtype === 'q4' ? 'int4' : values.dtype) as WeightFormat
  if (!FORMATS.includes(weights)) throw new ConvertUsageError(`--dtype must be one of ${FORMATS.join(', ')} (got ${values.dtype})`)
  if (!values.out) throw new ConvertUsageError('--out is required')
  if (Boolean(values.from) === Boolean(values.random)) throw new ConvertUsageError('give exactly one of --from <checkpoint dir> or --random <config.json>')
  const chosen = values.for !== undefined
    ? graphForDevice(values.for, weights, values, values.from ? join(values.from, 'config.json') : values.random as string)
    : graphAsAsked(weights, values)
  if (values['capture-step'] && chosen.attention !== 'gqa-masked') throw new ConvertUsageError('--capture-step goes with the GPU form (--for gpu, or --attention gqa-masked)')
  const graph = { ...chosen, captureStep: values['capture-step'] === true }
  if (values.from) {
    if (values.tokenizer) throw new ConvertUsageError('--tokenizer applies to --random only (a checkpoint brings its own)')
    return convertCheckpoint({ from: values.from, out: values.out, weights, ...graph })
  }
  const seed = Number(values.seed)
  if (!Number.isSafeInteger(seed) || seed < 0) throw new ConvertUsageError(`--seed must be a non-negative integer (got ${values.seed})`)
  return convertRandom({ configPath: values.random as string, out: values.out, weights, seed, tokenizerDir: values.tokenizer, ...graph })
}

type GraphChoice = Omit<GraphOptions, 'weights' | 'form'>
type ConvertArgs = Record<string, string | boolean | undefined>

/** The graph options given one by one. */
function graphAsAsked (weights: WeightFormat, values: ConvertArgs): GraphChoice {
  const attention = (values.attention ?? 'standard') as AttentionStyle
  if (attention !== 'standard' && attention !== 'gqa' && attention !== 'mha' && attention !== 'gqa-masked') throw new ConvertUsageError(`--attention must be standard, gqa, mha or gqa-masked (got ${String(values.attention)})`)
  // Unset, the converter picks the style that goes with the attention (writeOnnx).
  const cache = values.cache as CacheStyle | undefined
  if (cache !== undefined && cache !== 'append' && cache !== 'concat') throw new ConvertUsageError(`--cache must be append or concat (got ${String(values.cache)})`)
  if (attention !== 'standard' && cache === 'append') throw new ConvertUsageError(`--attention ${attention} returns the whole cache: it takes --cache concat only`)
  let int4BlockSize: number | undefined
  if (values['block-size'] !== undefined) {
    int4BlockSize = Number(values['block-size'])
    if (!(INT4_BLOCK_SIZES as readonly number[]).includes(int4BlockSize)) throw new ConvertUsageError(`--block-size must be one of ${INT4_BLOCK_SIZES.join(', ')} (got ${String(values['block-size'])})`)
    if (weights !== 'int4') throw new ConvertUsageError('--block-size applies to --dtype int4 only')
  }
  const int4Compute = values['int4-compute'] as Int4Compute | undefined
  if (int4Compute !== undefined) {
    if (int4Compute !== 'int8' && int4Compute !== 'float') throw new ConvertUsageError(`--int4-compute must be int8 or float (got ${String(values['int4-compute'])})`)
    if (weights !== 'int4') throw new ConvertUsageError('--int4-compute applies to --dtype int4 only')
  }
  const promptGraph = values['prompt-graph'] === true
  if (promptGraph && (attention !== 'standard' || cache === 'concat' || weights === 'fp16')) {
    throw new ConvertUsageError('--prompt-graph goes with --attention standard, the append cache and --dtype fp32, int4 or int8')
  }
  return { attention, cache, int4BlockSize, int4Compute, promptGraph }
}

/** --for cpu|gpu: the form `chatd pull` writes for that device (model-forms.ts), in place of the options one by one. */
function graphForDevice (form: string, weights: WeightFormat, values: ConvertArgs, configFile: string): GraphChoice {
  if (!(MODEL_FORMS as readonly string[]).includes(form)) throw new ConvertUsageError(`--for must be cpu or gpu (got ${form})`)
  const given = ['attention', 'cache', 'block-size', 'int4-compute', 'prompt-graph'].filter(name => values[name] !== undefined && values[name] !== false)
  if (given.length > 0) throw new ConvertUsageError(`--for ${form} sets the graph options itself: leave out ${given.map(n => `--${n}`).join(', ')}`)
  return formOptions(form as ModelForm, weights, readDecoderConfig(configFile).headDim)
}
