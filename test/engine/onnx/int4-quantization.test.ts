// The int4 block quantizer that `chatd convert --dtype int4` writes
// MatMulNBits weights with: Q4_0's rounding rule (all 16 levels), checked on
// seeded weights against the float values it stands for.
import t from 'tap'
import { dequantizeInt4, quantizeInt4 } from '../../../src/convert/tensors.ts'

function seededGaussian (count: number, seed: number, scale: number): Float32Array {
  let s = seed >>> 0
  const uniform = (): number => {
    s = (Math.imul(s, 1103515245) + 12345) >>> 0
    return (s + 0.5) / 2 ** 32
  }
  const out = new Float32Array(count)
  for (let i = 0; i < count; i++) out[i] = Math.sqrt(-2 * Math.log(uniform())) * Math.cos(2 * Math.PI * uniform()) * scale
  return out
}

function relativeRmsError (a: Float32Array, b: Float32Array): number {
  let err = 0
  let ref = 0
  for (let i = 0; i < a.length; i++) {
    err += (a[i] - b[i]) ** 2
    ref += a[i] ** 2
  }
  return Math.sqrt(err / ref)
}

const N = 64
const K = 1536

for (const blockSize of [32, 64, 128]) {
  t.test(`block ${blockSize}: each block's largest value is exact and every other value within half a step`, t => {
    const data = seededGaussian(N * K, blockSize, 0.02)
    const q = quantizeInt4({ shape: [N, K], data }, blockSize)
    const back = dequantizeInt4(q).data
    let worst = 0
    for (let row = 0; row < N; row++) {
      for (let b = 0; b < q.blocksPerRow; b++) {
        const scale = q.scales[row * q.blocksPerRow + b]
        let extreme = 0
        let extremeAt = -1
        for (let j = 0; j < blockSize; j++) {
          const i = row * K + b * blockSize + j
          if (Math.abs(data[i]) > Math.abs(extreme)) { extreme = data[i]; extremeAt = i }
        }
        t.equal(back[extremeAt], Math.fround(-8 * scale), 'the extreme maps to level -8')
        for (let j = 0; j < blockSize; j++) {
          const i = row * K + b * blockSize + j
          // Only a value of the opposite sign as large as the extreme can clip (to +7).
          if (Math.abs(data[i]) > 7.5 * Math.abs(scale)) continue
          worst = Math.max(worst, Math.abs(back[i] - data[i]) / Math.abs(scale))
        }
      }
    }
    t.ok(worst <= 0.5 + 1e-5, `rounding error at most half a step (worst ${worst.toFixed(4)})`)
    t.end()
  })
}

t.test('uses all 16 levels: error on Gaussian weights matches Q4_0, below a 15-level (amax / 7) rule', t => {
  const data = seededGaussian(N * K, 7, 0.02)
  // Measured on these weights: 16 levels give 8.6% (block 32), 9.5% (64),
  // 10.3% (128); the amax / 7 rule gave 9.7%, 10.8%, 11.8% on such weights.
  const limits: Record<number, number> = { 32: 0.089, 64: 0.099, 128: 0.108 }
  for (const [blockSize, limit] of Object.entries(limits)) {
    const q = quantizeInt4({ shape: [N, K], data }, Number(blockSize))
    const error = relativeRmsError(data, dequantizeInt4(q).data)
    t.ok(error < limit, `block ${blockSize}: relative RMS error ${(100 * error).toFixed(2)}% < ${(100 * limit).toFixed(1)}%`)
  }
  const levels = new Set<number>()
  const q = quantizeInt4({ shape: [N, K], data }, 32)
  for (const byte of q.packed) { levels.add(byte & 0x0f); levels.add(byte >> 4) }
  t.equal(levels.size, 16, 'every 4-bit level occurs')
  t.end()
})

t.test('an all-zero block gets scale 0 and decodes to zeros', t => {
  const data = new Float32Array(2 * 32)
  data.fill(0.5, 32) // second block non-zero
  const q = quantizeInt4({ shape: [1, 64], data }, 32)
  t.equal(q.scales[0], 0)
  t.same(Array.from(dequantizeInt4(q).data.subarray(0, 32)), new Array(32).fill(0))
  t.equal(q.scales[1], Math.fround(0.5 / -8))
  t.same(Array.from(dequantizeInt4(q).data.subarray(32)), new Array(32).fill(0.5))
  t.end()
})

t.test('a K that is not a whole number of blocks is padded with zeros', t => {
  const data = seededGaussian(3 * 40, 3, 1)
  const q = quantizeInt4({ shape: [3, 40], data }, 32)
  t.equal(q.blocksPerRow, 2)
  const back = dequantizeInt4(q).data
  t.equal(back.length, 120)
  t.ok(relativeRmsError(data, back) < 0.12, 'values survive')
  t.end()
})
