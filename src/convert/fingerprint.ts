// A short hash of the converter's own source files. Caches of converted
// models (test fixtures, the benchmarks' model) are keyed on it, so a change
// to how models are written (the graph, the int4 rounding rule) rebuilds them
// instead of silently reusing models the current code would not write.
import crypto from 'node:crypto'
import fs from 'node:fs'
import path from 'node:path'
import { fileURLToPath } from 'node:url'

const CONVERTER_DIR = path.dirname(fileURLToPath(import.meta.url))

export function converterFingerprint (): string {
  const hash = crypto.createHash('sha256')
  for (const file of fs.readdirSync(CONVERTER_DIR).sort()) {
    hash.update(file)
    hash.update(fs.readFileSync(path.join(CONVERTER_DIR, file)))
  }
  return hash.digest('hex').slice(0, 12)
}
