// The int4 kernel alone: one com.microsoft MatMulNBits node of a decoder's
// shape, timed at decode-like (1, 4 rows) and prompt-like (128 rows) inputs for
// each block size, as GB/s of weights read and GFLOP/s. A decode step is ~85%
// this kernel (npm run bench:engine -- --profile), so these figures bound it.
//
//   npm run bench:matmul -- [--n 17920] [--k 1536] [--blocks 32,64,128] [--rows 1,4,128]
//                           [--copies 40] [--threads N] [--accuracy-level 4] [--no-huge-pages] [--no-int8]
//
// It also times the prompt graph's int8 projection (decoder-graph.ts int8Linear: per-token
// activation quantization, MatMulIntegerToFloat, the row scales) at the same shapes, as the row
// "int8" (--no-int8 skips it).
//
// The graph chains `--copies` nodes with distinct weights and inputs (40 x the
// MLP's gate/up projection is ~700 MB), so the weights cannot sit in cache and
// onnxruntime cannot merge identical nodes: with one node, or copies of one
// weight, it measures cache bandwidth instead of memory bandwidth.
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { int8Linear } from '../src/convert/decoder-graph.ts'
import { attr, GraphBuilder } from '../src/convert/graph-builder.ts'
import { DataType, encodeModel } from '../src/convert/onnx-proto.ts'
import { quantizeInt4, quantizeInt8, toFloat32Bytes } from '../src/convert/tensors.ts'
import { ort } from '../src/engine/onnx/device/ort.ts'
import { ensureHugePages, hugePagesOn } from './huge-pages.ts'
import { scriptArgs } from './script-args.ts'

const { values } = scriptArgs(import.meta.url, {
  options: {
    n: { type: 'string', default: '17920' },
    k: { type: 'string', default: '1536' },
    blocks: { type: 'string', default: '32,64,128' },
    rows: { type: 'string', default: '1,4,128' },
    copies: { type: 'string', default: '40' },
    threads: { type: 'string', default: '0' },
    'accuracy-level': { type: 'string', default: '4' },
    'huge-pages': { type: 'boolean', default: true },
    int8: { type: 'boolean', default: true },
  },
  allowNegative: true,
})
ensureHugePages(values['huge-pages'])

const N = Number(values.n)
const K = Number(values.k)
const copies = Number(values.copies)
const threads = Number(values.threads) || os.availableParallelism()
const OUT = path.resolve('bench-out', 'matmul')
fs.mkdirSync(OUT, { recursive: true })

// Seeded weights, quantized once per block size; each copy flips a different
// bit pattern in the packed bytes so no two nodes share a weight.
const weights = new Float32Array(N * K)
let seed = 1
for (let i = 0; i < weights.length; i++) {
  seed = (Math.imul(seed, 1103515245) + 12345) >>> 0
  weights[i] = (seed / 2 ** 32 - 0.5) * 0.1
}

console.log(`MatMulNBits N=${N} K=${K}, ${copies} distinct nodes, ${threads} threads, accuracy_level ${values['accuracy-level']}, huge pages ${hugePagesOn()}`)
console.log('| block (or int8) | rows | ms per node | weights GB/s | GFLOP/s |')
console.log('|---:|---:|---:|---:|---:|')
/** How one copy of a kind is written, and its weights' bytes. Each copy flips a different bit pattern of the weights, so no two nodes share one. */
function projection (kind: number | 'int8'): { bytesPerNode: number; node: (g: GraphBuilder, input: string, c: number) => string } {
  if (kind === 'int8') {
    const q = quantizeInt8({ shape: [N, K], data: weights })
    return {
      bytesPerNode: q.values.byteLength + q.scales.byteLength,
      node: (g, input, c) => int8Linear(g, input, `w${c}`, { values: Int8Array.from(q.values, (v, i) => Math.max(-127, v ^ ((i * 7 + c * 13) & 0x33))), scales: q.scales }),
    }
  }
  const q = quantizeInt4({ shape: [N, K], data: weights }, kind)
  return {
    bytesPerNode: q.packed.byteLength + q.scales.byteLength,
    node: (g, input, c) => {
      const b = g.initializer(`w${c}.qweight`, DataType.UINT8, [N, q.blocksPerRow, q.blockSize / 2], q.packed.map((v, i) => v ^ ((i * 7 + c * 13) & 0x77)))
      const scales = g.initializer(`w${c}.scales`, DataType.FLOAT, [N * q.blocksPerRow], toFloat32Bytes(q.scales))
      return g.op('MatMulNBits', [input, b, scales], {
        K: attr.i(K), N: attr.i(N), bits: attr.i(4), block_size: attr.i(q.blockSize), accuracy_level: attr.i(Number(values['accuracy-level'])),
      }, { domain: 'com.microsoft' })
    },
  }
}

/** One graph of `copies` distinct nodes of a kind; its weights' bytes per node. */
function buildGraph (kind: number | 'int8'): { bytes: Uint8Array; bytesPerNode: number } {
  const { bytesPerNode, node } = projection(kind)
  const g = new GraphBuilder(null)
  const x = g.input('x', DataType.FLOAT, ['rows', K])
  for (let c = 0; c < copies; c++) {
    g.output(node(g, g.op('Mul', [x, g.float([1 + c / 64], true)]), c), DataType.FLOAT, ['rows', N])
  }
  return { bytes: encodeModel(g.build([{ domain: '', version: 17 }, { domain: 'com.microsoft', version: 1 }], {})), bytesPerNode }
}

const kinds: Array<number | 'int8'> = [...values.blocks.split(',').map(Number), ...(values.int8 ? ['int8' as const] : [])]
for (const kind of kinds) {
  const { bytes, bytesPerNode } = buildGraph(kind)
  const file = path.join(OUT, `matmul-${N}x${K}-${kind === 'int8' ? 'int8' : `block${kind}`}.onnx`)
  fs.writeFileSync(file, bytes)
  const session = await ort.InferenceSession.create(file, { intraOpNumThreads: threads, graphOptimizationLevel: 'all', logSeverityLevel: 3 })
  for (const rows of values.rows.split(',').map(Number)) {
    const feeds = { x: new ort.Tensor('float32', new Float32Array(rows * K).fill(0.01), [rows, K]) }
    for (let i = 0; i < 2; i++) await session.run(feeds)
    const reps = rows >= 64 ? 3 : 10
    const started = performance.now()
    for (let i = 0; i < reps; i++) await session.run(feeds)
    const ms = (performance.now() - started) / reps / copies
    console.log(`| ${kind} | ${rows} | ${ms.toFixed(3)} | ${(bytesPerNode / ms / 1e6).toFixed(1)} | ${((2 * rows * N * K) / ms / 1e6).toFixed(0)} |`)
  }
  await session.release()
  fs.rmSync(file)
}
