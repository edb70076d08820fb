// Attention's core alone, one layer of the 1.5B shape (12 query heads, 2 kv
// heads, head_dim 128): the operators `chatd convert` writes (grouped-query
// attention by reshapes, MatMul / Softmax / MatMul under an additive mask),
// and for comparison the ONNX standard `Attention` operator (opset 23) that
// onnxruntime also implements. Shapes are new tokens x context: a multi-turn
// chat's cached turn (436 new tokens over 1615), a decode step at that context,
// a 128-token prompt, a decode step after it. Prints ms per layer, the
// model's 28 layers, and the largest difference between the two outputs.
//
//   npm run bench:attention -- [--shapes 436x1615,1x1615,128x128,1x256] [--threads N] [--no-huge-pages]
import { groupedAttention } from '../src/convert/decoder-graph.ts'
import { GraphBuilder } from '../src/convert/graph-builder.ts'
import { DataType, encodeModel } from '../src/convert/onnx-proto.ts'
import { ort } from '../src/engine/onnx/device/ort.ts'
import { ensureHugePages } from './huge-pages.ts'
import { scriptArgs } from './script-args.ts'

const { values } = scriptArgs(import.meta.url, {
  options: {
    shapes: { type: 'string', default: '436x1615,1x1615,128x128,1x256' },
    threads: { type: 'string', default: '0' },
    'huge-pages': { type: 'boolean', default: true },
  },
  allowNegative: true,
})
ensureHugePages(values['huge-pages'])

const SHAPE = { numHeads: 12, numKvHeads: 2, headDim: 128 }
const LAYERS = 28
type Kind = 'chatd' | 'onnx-attention'

function graph (kind: Kind): Uint8Array {
  const { numHeads: nH, numKvHeads: nKv, headDim: hd } = SHAPE
  const g = new GraphBuilder(null)
  const q = g.input('q', DataType.FLOAT, [1, nH, 'S', hd])
  const k = g.input('k', DataType.FLOAT, [1, nKv, 'T', hd])
  const v = g.input('v', DataType.FLOAT, [1, nKv, 'T', hd])
  const mask = g.input('mask', DataType.FLOAT, [1, 1, 'S', 'T'])
  if (kind === 'chatd') g.op('Identity', [groupedAttention(g, SHAPE, q, k, v, mask)], {}, { output: 'y' })
  else g.op('Attention', [q, k, v, mask], {}, { output: 'y' })
  g.output('y', DataType.FLOAT, [1, nH, 'S', hd])
  // The standard Attention operator needs opset 23, which needs IR version 10.
  return encodeModel({ ...g.build([{ domain: '', version: kind === 'chatd' ? 17 : 23 }], {}), ir_version: 10 })
}

/** Deterministic values in [-1, 1]. */
function filled (n: number, seed: number): Float32Array {
  const out = new Float32Array(n)
  for (let i = 0; i < n; i++) out[i] = Math.sin((i + 1) * 12.9898 + seed)
  return out
}

/** Causal mask for S new tokens at the end of a context of T: 0 where allowed, the most negative float elsewhere. */
function causalMask (S: number, T: number): Float32Array {
  const out = new Float32Array(S * T)
  for (let s = 0; s < S; s++) for (let t = 0; t < T; t++) out[s * T + t] = t <= T - S + s ? 0 : -3.4028234663852886e38
  return out
}

const threads = Number(values.threads)
const sessions = new Map<Kind, ort.InferenceSession>()
for (const kind of ['chatd', 'onnx-attention'] as const) {
  sessions.set(kind, await ort.InferenceSession.create(graph(kind), threads > 0 ? { intraOpNumThreads: threads } : {}))
}
console.log('| new tokens x context | chatd ms/layer | x28 | onnx Attention ms/layer | x28 | max diff |')
console.log('|---|---:|---:|---:|---:|---:|')
for (const shape of values.shapes.split(',')) {
  const [S, T] = shape.split('x').map(Number)
  const { numHeads: nH, numKvHeads: nKv, headDim: hd } = SHAPE
  const feeds = {
    q: new ort.Tensor('float32', filled(nH * S * hd, 1), [1, nH, S, hd]),
    k: new ort.Tensor('float32', filled(nKv * T * hd, 2), [1, nKv, T, hd]),
    v: new ort.Tensor('float32', filled(nKv * T * hd, 3), [1, nKv, T, hd]),
    mask: new ort.Tensor('float32', causalMask(S, T), [1, 1, S, T]),
  }
  const ms = new Map<Kind, number>()
  const outputs = new Map<Kind, Float32Array>()
  for (const [kind, session] of sessions) {
    for (let i = 0; i < 3; i++) await session.run(feeds) // warm-up
    const reps = Math.max(5, Math.round(2e8 / (nH * S * T * hd)))
    const times: number[] = []
    let y: Float32Array = new Float32Array(0)
    for (let i = 0; i < reps; i++) {
      const started = performance.now()
      y = (await session.run(feeds)).y.data as Float32Array
      times.push(performance.now() - started)
    }
    times.sort((a, b) => a - b)
    ms.set(kind, times[times.length >> 1])
    outputs.set(kind, y)
  }
  const a = outputs.get('chatd') as Float32Array
  const b = outputs.get('onnx-attention') as Float32Array
  let diff = 0
  for (let i = 0; i < a.length; i++) diff = Math.max(diff, Math.abs(a[i] - b[i]))
  const c = ms.get('chatd') as number
  const o = ms.get('onnx-attention') as number
  console.log(`| ${S} x ${T} | ${c.toFixed(3)} | ${(c * LAYERS).toFixed(1)} | ${o.toFixed(3)} | ${(o * LAYERS).toFixed(1)} | ${diff.toExponential(1)} |`)
}
