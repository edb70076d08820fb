// npm run bench:steps: the engine's decode step alone, by batch size. Each
// row gets its own 128-token prompt, the rows are gathered into one batch
// cache as the scheduler does, and the batch decodes N steps; prints the
// prompt rate and the median step time and tokens/s for each batch size.
// Runs through the engine's cache layout (kv-cache.ts), so it measures what
// a batch of streams costs with the graph's own cache outputs (append or
// concat), without HTTP, sampling or the scheduler. Prompts run on the
// model's int8 prompt graph where it has one, as in the server. `--device webgpu
// --gpu` measures the GPU form on the GPU (the cache kept in GPU memory): beside
// gpu-forms.ts's bare onnxruntime step and the server's, what the engine's cache
// layout adds (scripts/gpu-check.sh's forms step runs it).
//
//   npm run bench:steps -- [--model-dir DIR] [--block-size 32|64|128] [--rows 1,4,8] [--steps 128] [--prompt 128]
//                          [--threads N] [--no-huge-pages] [--device cpu|webgpu] [--gpu] [--model-config FILE]
import path from 'node:path'
import { DecoderSession } from '../src/engine/onnx/device/decoder-session.ts'
import { cacheLayoutFor, type RowCache } from '../src/engine/onnx/cache/kv-cache.ts'
import { readModelDir } from '../src/engine/onnx/model-dir.ts'
import { benchModelDir } from './bench-model.ts'
import { ensureHugePages } from './huge-pages.ts'
import { scriptArgs } from './script-args.ts'

const { values } = scriptArgs(import.meta.url, {
  options: {
    'model-dir': { type: 'string' },
    'block-size': { type: 'string', default: '32' },
    rows: { type: 'string', default: '1,4,8' },
    steps: { type: 'string', default: '128' },
    prompt: { type: 'string', default: '128' },
    threads: { type: 'string', default: '0' },
    'huge-pages': { type: 'boolean', default: true },
    device: { type: 'string', default: 'cpu' },
    gpu: { type: 'boolean', default: false },
    'model-config': { type: 'string' },
  },
  allowNegative: true,
})
ensureHugePages(values['huge-pages'])
if (values.device !== 'cpu' && values.device !== 'webgpu') throw new Error(`--device takes cpu or webgpu (got ${values.device})`)
const config = values['model-config'] && path.resolve(values['model-config'])
const modelDir = values['model-dir'] ?? benchModelDir(Number(values['block-size']), 'chatd', { gpu: values.gpu, config })
const session = await DecoderSession.load(readModelDir(modelDir, 'q4'), { device: values.device, threads: Number(values.threads) })
const layout = cacheLayoutFor(session)
const promptLen = Number(values.prompt)
const prompt = Array.from({ length: promptLen }, (_, k) => 32 + (k * 7) % 90)

async function measure (rows: number, steps: number): Promise<{ prefill: number; stepMs: number }> {
  const started = performance.now()
  const solo: RowCache[] = []
  for (let b = 0; b < rows; b++) solo.push((await layout.run(layout.empty(), [prompt], 1, true)).cache)
  const prefilled = performance.now()
  let cache = layout.gather(solo.map(c => ({ cache: c, row: 0 })))
  for (const c of solo) layout.free(c)
  const times: number[] = []
  for (let i = 0; i < steps; i++) {
    const t = performance.now()
    cache = (await layout.run(cache, Array.from({ length: rows }, () => [100]), 1)).cache
    times.push(performance.now() - t)
  }
  layout.free(cache)
  times.sort((a, b) => a - b)
  return { prefill: (rows * promptLen) / ((prefilled - started) / 1000), stepMs: times[times.length >> 1] }
}

await measure(1, 8) // warm-up: the first runs allocate and prepack
console.log(`${modelDir} (${session.cacheOutputs} cache${session.cacheInPlace ? ' kept in place in GPU memory' : session.cacheOnDevice ? ' in GPU memory' : ''}) on ${session.device}, ${promptLen}-token prompts\n`)
console.log('| rows | prompt tok/s | step ms (median) | decode tok/s |')
console.log('|---:|---:|---:|---:|')
for (const rows of values.rows.split(',').map(Number)) {
  const r = await measure(rows, Number(values.steps))
  console.log(`| ${rows} | ${r.prefill.toFixed(1)} | ${r.stepMs.toFixed(1)} | ${((rows * 1000) / r.stepMs).toFixed(1)} |`)
}
await session.close()
