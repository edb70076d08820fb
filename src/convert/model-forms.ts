// The two forms chatd writes a model in, by the device that will run it.
//   cpu: int4 with int8 activations (accuracy_level 4), the append cache, and,
//        for int4, the int8 prompt graph: the fastest on a CPU (docs/performance.md).
//   gpu: the concat cache (its cache_delta keeps the cache on the GPU between steps),
//        int4 computed in float32 (what a GPU computes, so it matches the CPU token for
//        token), and GroupQueryAttention under chatd's own mask (gqa-masked: half the
//        kernels a step) where the head size allows it, plain attention otherwise; its int4
//        gate and up projections apart, which the WebGPU provider fuses with the norm
//        and SiLU into one kernel (decoder-graph.ts).
// `chatd pull` converts a checkpoint into the form for the model's device; `chatd
// convert --for cpu|gpu` writes either by hand.
import { GQA_HEAD_SIZE_MULTIPLE, type AttentionStyle, type CacheStyle, type Int4Compute, type WeightFormat } from './decoder-graph.ts'

export const MODEL_FORMS = ['cpu', 'gpu'] as const
export type ModelForm = typeof MODEL_FORMS[number]

/** The graph options of a form, beside the weight format. */
export interface FormOptions {
  attention: AttentionStyle
  cache: CacheStyle
  int4Compute?: Int4Compute
  promptGraph: boolean
}

/** The int8 prompt graph comes with the CPU form of int4 weights, where it pays (several times faster prompts). */
export function formHasPromptGraph (form: ModelForm, weights: WeightFormat): boolean {
  return form === 'cpu' && weights === 'int4'
}

export function formOptions (form: ModelForm, weights: WeightFormat, headDim: number): FormOptions {
  if (form === 'cpu') return { attention: 'standard', cache: 'append', promptGraph: formHasPromptGraph(form, weights) }
  // gqa-masked: fp32 and int4 weights, and head sizes onnxruntime's GroupQueryAttention takes.
  const masked = (weights === 'int4' || weights === 'fp32') && headDim % GQA_HEAD_SIZE_MULTIPLE === 0
  return {
    attention: masked ? 'gqa-masked' : 'standard',
    cache: 'concat',
    ...(weights === 'int4' ? { int4Compute: 'float' as const } : {}),
    promptGraph: false,
  }
}

/** What a form is called in messages. */
export function formName (form: ModelForm): string {
  return form === 'gpu' ? 'the GPU form' : 'the CPU form'
}
