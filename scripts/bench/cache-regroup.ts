// What regrouping a batch's host cache costs with and without the freed buffers kept for reuse
// (SlotBuffers' spares): the 1.5B's cache shape (28 layers, 2 kv heads of 128, float32), `--rows`
// rows of `--positions` positions gathered into a new cache `--times` times, the old one freed
// each time, as rows joining or leaving a batch do. Memory never written costs a page fault every
// 4 KiB on first touch; buffers of 32 MiB and more are mapped fresh by glibc on every allocation.
//
//   node scripts/bench/cache-regroup.ts --spares   # and without: node scripts/bench/cache-regroup.ts
import { SlotBuffers } from '../../src/engine/onnx/cache/slot-buffers.ts'
import { scriptArgs } from '../script-args.ts'

const { values } = scriptArgs(import.meta.url, { options: { spares: { type: 'boolean', default: false }, rows: { type: 'string', default: '8' }, positions: { type: 'string', default: '4000' }, times: { type: 'string', default: '6' } } })
const rowCount = Number(values.rows)
const positions = Number(values.positions)
const names = Array.from({ length: 56 }, (_, i) => `past_key_values.${i >> 1}.${i % 2 === 1 ? 'value' : 'key'}`)
const limits = values.spares ? { most: 2 ** 40, total: 2 ** 40 } : { most: 0, total: 0 }
const slots = new SlotBuffers(names, { heads: 2, dim: 128, type: 'float32' }, limits)
const rows = Array.from({ length: rowCount }, () => slots.allocate([positions], positions + 64))
let batch = slots.gather(rows.map(r => ({ slots: r, row: 0, length: positions })))
const times: number[] = []
for (let k = 0; k < Number(values.times); k++) {
  const start = performance.now()
  const next = slots.gather(batch.lengths.map((length, row) => ({ slots: batch, row, length })))
  times.push(performance.now() - start)
  slots.free(batch)
  batch = next
}
console.log(`${values.spares ? 'with spares' : 'without spares'}: ${rowCount} rows x ${positions} positions (${(slots.bytesHeld / 2 ** 20).toFixed(0)} MiB in use) regrouped, ms each: ${times.map(x => x.toFixed(0)).join(', ')}`)
