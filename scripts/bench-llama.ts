// npm run bench:llama: llama.cpp alone, on this machine, on the benchmark
// model's shape and weights (Q4_0), with llama.cpp's own tools. `npm run bench`
// runs the same in the same run as chatd and reports the ratios; this is for
// a llama.cpp-only look, or to prepare (fetch, build, write the model) ahead.
//
//   npm run bench:llama -- [--threads N] [--prompt 128] [--gen 128] [--concurrency 1,2,4,8]
//                          [--reps 5] [--jobs 2] [--json FILE] [--prepare-only] [--no-huge-pages]
import fs from 'node:fs'
import path from 'node:path'
import { ensureHugePages } from './huge-pages.ts'
import { LlamaCppUnavailable, measureLlamaCpp, prepareLlamaCpp } from './llama-cpp/index.ts'
import { scriptArgs } from './script-args.ts'

const { values } = scriptArgs(import.meta.url, {
  options: {
    threads: { type: 'string', default: '0' },
    prompt: { type: 'string', default: '128' },
    gen: { type: 'string', default: '128' },
    concurrency: { type: 'string', default: '1,2,4,8' },
    reps: { type: 'string', default: '5' },
    jobs: { type: 'string', default: '2' },
    json: { type: 'string' },
    'prepare-only': { type: 'boolean', default: false },
    'huge-pages': { type: 'boolean', default: true },
  },
  allowNegative: true,
})
ensureHugePages(values['huge-pages'])
const ROOT = path.resolve(path.dirname(new URL(import.meta.url).pathname), '..')
const OUT = path.join(ROOT, 'bench-out')
fs.mkdirSync(OUT, { recursive: true })

let prepared
try {
  prepared = prepareLlamaCpp({ out: OUT, threads: Number(values.threads), jobs: Number(values.jobs) })
} catch (err) {
  if (err instanceof LlamaCppUnavailable) {
    console.error(`llama.cpp cannot be built here: ${err.message}`)
    process.exit(2)
  }
  throw err
}
console.error(`llama.cpp ${prepared.source.tag} (${prepared.source.commit.slice(0, 10)}): tools in ${path.relative(process.cwd(), prepared.build.binDir)}, model ${path.relative(process.cwd(), prepared.model.file)} (${prepared.model.types})`)
if (values['prepare-only']) process.exit(0)

const levels = values.concurrency.split(',').map(Number)
const report = measureLlamaCpp(prepared, { prompt: Number(values.prompt), gen: Number(values.gen), levels, reps: Number(values.reps) })
const jsonPath = values.json ?? path.join(OUT, 'bench-llama.json')
fs.writeFileSync(jsonPath, JSON.stringify(report, null, 2) + '\n')

console.log(`\nllama.cpp ${report.llama_cpp_version}: ${report.llama_cpp_model}, ${report.llama_cpp_threads} threads`)
console.log(`${report.llama_cpp_build}\n`)
console.log(`one sequence (llama-bench): prefill ${report.llama_cpp_prefill_tok_s} ± ${report.llama_cpp_prefill_tok_s_stddev} tok/s, decode ${report.llama_cpp_decode_tok_s_1} ± ${report.llama_cpp_decode_tok_s_1_stddev} tok/s\n`)
console.log('| sequences | aggregate tok/s (prefill included) | decode-phase tok/s | prefill tok/s |')
console.log('|---:|---:|---:|---:|')
for (const l of report.llama_cpp_levels) console.log(`| ${l.concurrency} | ${l.aggregate_tok_s} | ${l.decode_tok_s} | ${l.prefill_tok_s} |`)
console.log(`\nwrote ${path.relative(process.cwd(), jsonPath)}`)
