// One of the GPU benchmark's slow preparations, on its own, so that
// scripts/gpu-check.sh can run them side by side (each is one CPU core's work
// for a minute or more on the 1.5B shape): the chatd model in the GPU form, the
// earlier GPU form with plain attention (gpu-forms.ts compares the two), the
// chatd model in the CPU form, or llama.cpp's Q4_0 GGUF (its Vulkan build must
// be in bench-out/ already); gpu-model-causal and gpu-model-int8 are the GPU form
// for rows without padding and with int8 activations, measured by gpu-forms.ts only;
// gpu-model-static-decode the GPU form's decode step for graph capture, measured
// by graph-capture.ts only.
// `npm run bench -- --device webgpu` finds them built.
//
//   node scripts/bench/gpu-prepare.ts gpu-model|gpu-model-standard|gpu-model-causal|gpu-model-int8|gpu-model-static-decode|cpu-model|llama [--model-config FILE]
import path from 'node:path'
import { benchModelDir } from '../bench-model.ts'
import { prepareLlamaCppVulkan } from '../llama-cpp/index.ts'
import { scriptArgs } from '../script-args.ts'

const ROOT = path.resolve(path.dirname(new URL(import.meta.url).pathname), '../..')
const { values, positionals } = scriptArgs(import.meta.url, { options: { 'model-config': { type: 'string' } }, allowPositionals: true })
const config = values['model-config'] && path.resolve(values['model-config'])
const part = positionals[0]
const started = performance.now()
if (part === 'gpu-model') benchModelDir(32, 'chatd', { gpu: true, config })
else if (part === 'gpu-model-standard') benchModelDir(32, 'chatd', { gpu: true, config, gpuAttention: 'standard' })
else if (part === 'gpu-model-causal') benchModelDir(32, 'chatd', { gpu: true, config, gpuAttention: 'gqa-causal' })
else if (part === 'gpu-model-static-decode') benchModelDir(32, 'chatd', { gpu: true, config, gpuAttention: 'gqa-static-decode' })
else if (part === 'gpu-model-int8') benchModelDir(32, 'chatd', { gpu: true, config, gpuInt8: true })
else if (part === 'cpu-model') benchModelDir(32, 'chatd', { config })
else if (part === 'llama') prepareLlamaCppVulkan({ out: path.join(ROOT, 'bench-out'), threads: 0, config })
else {
  console.error('usage: node scripts/bench/gpu-prepare.ts gpu-model|gpu-model-standard|gpu-model-causal|gpu-model-int8|gpu-model-static-decode|cpu-model|llama [--model-config FILE]')
  process.exit(2)
}
console.error(`${part}: ready in ${((performance.now() - started) / 1000).toFixed(0)} s`)
