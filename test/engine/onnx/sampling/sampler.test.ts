import t from 'tap'
import { float16BitsToFloat32 } from '../../../../src/engine/onnx/device/ort.ts'
import { argmax, sample, type SamplingParams } from '../../../../src/engine/onnx/sampling/sampler.ts'
import { createRng } from '../../../../src/engine/onnx/sampling/rng.ts'

const QWEN_LOGITS = 151936
const QWEN_VOCAB = 151665

/** Normal-ish random logits with a few clear leaders, like a language model's. */
function modelLikeLogits (seed: number, width: number): Float32Array {
  const rng = createRng(seed)
  const logits = new Float32Array(width)
  for (let i = 0; i < width; i++) logits[i] = (rng.next() + rng.next() + rng.next() - 1.5) * 4
  for (let j = 0; j < 10; j++) logits[Math.floor(rng.next() * width)] = 8 + rng.next() * 6
  return logits
}

function softmax (logits: ArrayLike<number>, temperature: number): number[] {
  let max = -Infinity
  for (let i = 0; i < logits.length; i++) max = Math.max(max, logits[i])
  const e = Array.from(logits, (l) => Math.exp((l - max) / temperature))
  const z = e.reduce((a, b) => a + b, 0)
  return e.map((x) => x / z)
}

/** Sampling frequencies of each id over `draws` samples. */
function frequencies (logits: Float32Array, params: SamplingParams, seed: number, draws: number, validVocab?: number): Map<number, number> {
  const rng = createRng(seed)
  const counts = new Map<number, number>()
  for (let i = 0; i < draws; i++) {
    const id = sample(logits, params, rng, validVocab)
    counts.set(id, (counts.get(id) ?? 0) + 1)
  }
  for (const [id, c] of counts) counts.set(id, c / draws)
  return counts
}

t.test('rng: seeded, repeatable, distinct, uniform', async (t) => {
  const seq = (seed?: number) => {
    const rng = createRng(seed)
    return Array.from({ length: 8 }, () => rng.next())
  }
  t.same(seq(42), seq(42), 'same seed, same sequence')
  t.notSame(seq(42), seq(43), 'different seeds differ')
  t.notSame(seq(0), seq(2 ** 32), 'the high bits of a seed count')
  t.notSame(seq(2 ** 40), seq(2 ** 40 + 1))
  t.same(seq(7.9), seq(7), 'fractional part is dropped')
  t.notSame(seq(), seq(), 'no seed: a random one each time')
  const unseeded = createRng()
  t.same(seq(unseeded.seed), (() => { const r = createRng(unseeded.seed); return Array.from({ length: 8 }, () => r.next()) })(), 'the random seed is reported and reproduces')
  t.throws(() => createRng(NaN), /finite/)

  const rng = createRng(1)
  const bins = new Array(10).fill(0)
  let min = 1
  let max = 0
  const N = 100000
  for (let i = 0; i < N; i++) {
    const x = rng.next()
    min = Math.min(min, x)
    max = Math.max(max, x)
    bins[Math.floor(x * 10)]++
  }
  t.ok(min >= 0 && max < 1, 'values in [0, 1)')
  const chi2 = bins.reduce((acc, c) => acc + (c - N / 10) ** 2 / (N / 10), 0)
  t.ok(chi2 < 27.9, `uniform over 10 bins (chi-square ${chi2.toFixed(2)} < 27.9, p = 0.001)`)
})

t.test('temperature 0 is greedy: argmax, lowest index on ties', async (t) => {
  const rng = createRng(1)
  const greedy = { temperature: 0, topK: 0, topP: 1 }
  t.equal(sample(Float32Array.of(0.1, 3, -1, 2), greedy, rng), 1)
  t.equal(sample(Float32Array.of(1, 5, 5, 2), greedy, rng), 1, 'tie: lowest index')
  t.equal(sample(Float32Array.of(NaN, -Infinity, -5), greedy, rng), 2, 'NaN never wins')
  t.equal(argmax(Float32Array.of(-Infinity, -Infinity)), 0)
  const wide = modelLikeLogits(5, QWEN_LOGITS)
  let expected = 0
  for (let i = 0; i < QWEN_VOCAB; i++) if (wide[i] > wide[expected]) expected = i
  t.equal(sample(wide, greedy, rng, QWEN_VOCAB), expected)
})

t.test('top_k = 1 and a tiny top_p both equal greedy', async (t) => {
  for (let seed = 1; seed <= 20; seed++) {
    const width = seed % 2 ? 1000 : QWEN_LOGITS
    const logits = modelLikeLogits(seed, width)
    const greedy = argmax(logits, Math.min(width, QWEN_VOCAB))
    const rng = createRng(seed)
    const valid = Math.min(width, QWEN_VOCAB)
    for (const params of [
      { temperature: 1.5, topK: 1, topP: 1 },
      { temperature: 1.5, topK: 0, topP: 1e-9 },
      { temperature: 1.5, topK: 40, topP: 1e-9 },
      { temperature: 0.7, topK: 0, topP: 0 },
    ]) {
      for (let i = 0; i < 20; i++) {
        const got = sample(logits, params, rng, valid)
        if (got !== greedy) t.equal(got, greedy, `seed ${seed} ${JSON.stringify(params)}`)
      }
    }
  }
  // Ties at the top: still the lowest index.
  const tied = Float32Array.of(0, 7, 3, 7, 7)
  t.equal(sample(tied, { temperature: 1, topK: 0, topP: 1e-9 }, createRng(1)), 1)
  t.equal(sample(tied, { temperature: 1, topK: 1, topP: 1 }, createRng(1)), 1)
  t.equal(sample(tied, { temperature: 1, topK: 2, topP: 1e-9 }, createRng(1)), 1)
})

t.test('same seed repeats, different seeds differ', async (t) => {
  const logits = modelLikeLogits(3, QWEN_LOGITS)
  for (const params of [
    { temperature: 0.8, topK: 0, topP: 0.95 },
    { temperature: 1, topK: 0, topP: 1 },
    { temperature: 1.2, topK: 50, topP: 0.9 },
  ]) {
    const run = (seed: number) => {
      const rng = createRng(seed)
      return Array.from({ length: 40 }, () => sample(logits, params, rng, QWEN_VOCAB))
    }
    t.same(run(123), run(123), `repeatable ${JSON.stringify(params)}`)
    t.notSame(run(123), run(124), `seed matters ${JSON.stringify(params)}`)
  }
})

t.test('temperature shapes the distribution as softmax(l / T)', async (t) => {
  const logits = Float32Array.of(2, 1, 0, -1)
  const draws = 40000
  let previousTop = 1
  for (const temperature of [0.5, 1, 2]) {
    const expected = softmax(logits, temperature)
    const freq = frequencies(logits, { temperature, topK: 0, topP: 1 }, 2024, draws)
    for (let id = 0; id < 4; id++) {
      const got = freq.get(id) ?? 0
      // 5 standard errors: fixed seed, so this is deterministic; the margin is for the design.
      const tolerance = 5 * Math.sqrt((expected[id] * (1 - expected[id])) / draws) + 1e-3
      t.ok(Math.abs(got - expected[id]) < tolerance, `T=${temperature} id ${id}: ${got.toFixed(4)} vs ${expected[id].toFixed(4)}`)
    }
    const top = freq.get(0) ?? 0
    if (temperature > 0.5) t.ok(top < previousTop, `higher temperature flattens (${top.toFixed(3)} < ${previousTop.toFixed(3)})`)
    previousTop = top
  }
})

t.test('top-k and top-p keep the right tokens, in the right proportions', async (t) => {
  // Four real candidates in a wider row, the rest far below: exercises the whole-vocabulary
  // (histogram) code and the top-k heap with a known answer. 2,000 wide to keep the draws quick.
  const logits = new Float32Array(2000).fill(-1000)
  const ids = [1500, 12, 1999, 99]
  const probs = [0.5, 0.3, 0.15, 0.05]
  ids.forEach((id, j) => (logits[id] = Math.log(probs[j])))
  const draws = 10000
  const check = (params: SamplingParams, kept: number[], label: string) => {
    const freq = frequencies(logits, params, 77, draws)
    const mass = kept.reduce((a, j) => a + probs[j], 0)
    for (const [id, f] of freq) t.ok(kept.some((j) => ids[j] === id), `${label}: sampled ${id} is allowed (${f})`)
    for (const j of kept) {
      const expected = probs[j] / mass
      const got = freq.get(ids[j]) ?? 0
      t.ok(Math.abs(got - expected) < 5 * Math.sqrt((expected * (1 - expected)) / draws) + 1e-3, `${label}: id ${ids[j]} ${got.toFixed(4)} vs ${expected.toFixed(4)}`)
    }
  }
  check({ temperature: 1, topK: 0, topP: 1 }, [0, 1, 2, 3], 'no filter')
  check({ temperature: 1, topK: 0, topP: 0.7 }, [0, 1], 'top_p 0.7')
  check({ temperature: 1, topK: 0, topP: 0.9 }, [0, 1, 2], 'top_p 0.9')
  check({ temperature: 1, topK: 0, topP: 0.4 }, [0], 'top_p 0.4')
  check({ temperature: 1, topK: 3, topP: 1 }, [0, 1, 2], 'top_k 3')
  check({ temperature: 1, topK: 3, topP: 0.7 }, [0, 1], 'top_k 3 then top_p 0.7 of the renormalised three')
  check({ temperature: 1, topK: 2, topP: 1 }, [0, 1], 'top_k 2')
})

t.test('top-p keeps exactly the reference nucleus on random wide rows', async (t) => {
  for (let seed = 1; seed <= 3; seed++) {
    const logits = modelLikeLogits(100 + seed, QWEN_LOGITS)
    const temperature = 0.8
    const topP = 0.95
    // Reference: sort by probability, keep the smallest prefix whose mass reaches top_p.
    const p = softmax(logits.subarray(0, QWEN_VOCAB), temperature)
    const order = p.map((_, i) => i).sort((a, b) => p[b] - p[a] || a - b)
    const nucleus = new Set<number>()
    let mass = 0
    for (const i of order) {
      nucleus.add(i)
      mass += p[i]
      if (mass >= topP) break
    }
    const rng = createRng(seed)
    const seen = new Set<number>()
    let outside = 0
    for (let k = 0; k < 500; k++) {
      const id = sample(logits, { temperature, topK: 0, topP }, rng, QWEN_VOCAB)
      if (!nucleus.has(id)) outside++
      seen.add(id)
    }
    t.equal(outside, 0, `seed ${seed}: every sample in the ${nucleus.size}-token nucleus`)
    t.ok(seen.size > 1, `seed ${seed}: sampling, not greedy (${seen.size} distinct)`)
  }
})

t.test('ids at or beyond validVocab are never sampled', async (t) => {
  const width = 1000
  const valid = 900
  const logits = modelLikeLogits(9, width)
  for (let i = valid; i < width; i++) logits[i] = 1e4 // padding columns that would win
  const rng = createRng(5)
  for (const params of [
    { temperature: 0, topK: 0, topP: 1 },
    { temperature: 1, topK: 0, topP: 1 },
    { temperature: 5, topK: 0, topP: 1 },
    { temperature: 1, topK: 0, topP: 0.9 },
    { temperature: 1, topK: 20, topP: 1 },
    { temperature: 2, topK: 950, topP: 0.99 },
  ]) {
    for (let i = 0; i < 500; i++) {
      const id = sample(logits, params, rng, valid)
      if (id >= valid) {
        t.fail(`sampled masked id ${id} with ${JSON.stringify(params)}`)
        break
      }
    }
  }
  t.equal(sample(Float32Array.of(1, 2), { temperature: 1, topK: 0, topP: 1 }, rng, 10) < 2, true, 'validVocab beyond the row is clamped')
  t.throws(() => sample(Float32Array.of(1), { temperature: 1, topK: 0, topP: 1 }, rng, 0), /no valid vocabulary/)
})

t.test('NaN and infinite logits', async (t) => {
  const rng = createRng(3)
  const params = { temperature: 1, topK: 0, topP: 0.9 }
  for (let i = 0; i < 200; i++) {
    const id = sample(Float32Array.of(NaN, 0, -Infinity, 0, NaN), params, rng)
    if (id !== 1 && id !== 3) t.fail(`sampled ${id}`)
  }
  t.equal(sample(Float32Array.of(0, Infinity, 1), params, rng), 1, '+Infinity: greedy')
  t.equal(sample(Float32Array.of(NaN, NaN), params, rng), 0, 'nothing sampleable: index 0')
  t.equal(sample(Float32Array.of(-Infinity, -Infinity, 3), { temperature: 1, topK: 2, topP: 1 }, rng), 2)
})

t.test('float16 logits convert to float32', async (t) => {
  const half = Uint16Array.of(0x3c00, 0xc000, 0x7bff, 0x0001, 0x0400, 0x7c00, 0xfc00, 0x8000, 0x3555, 0x7e00)
  const out = float16BitsToFloat32(half)
  t.same(Array.from(out.subarray(0, 8)), [1, -2, 65504, 2 ** -24, 2 ** -14, Infinity, -Infinity, -0])
  t.ok(Object.is(out[7], -0), 'negative zero')
  t.ok(Math.abs(out[8] - 0.33325195) < 1e-7, '0x3555 is 0.33325195')
  t.ok(Number.isNaN(out[9]), 'NaN')
})
