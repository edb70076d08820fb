// Property-based fuzzing of the sampler alone (fast, no model): for any row
// of logits (NaN, ±Infinity, ties, huge and denormal values) and any settings
// the API accepts, the token is an integer id below the valid vocabulary, and
// greedy-equivalent settings pick the argmax.
//
// Found by the engine fuzzer: temperature 5e-324 (the smallest double, valid
// per the schema) made 1/T overflow, no token had weight, and sample()
// returned undefined; the request failed with 500 "inference failed".

import t from 'tap'
import fc from 'fast-check'
import { createRng } from '../../src/engine/onnx/sampling/rng.ts'
import { argmax, sample } from '../../src/engine/onnx/sampling/sampler.ts'
import { assertHolds, FUZZ_SEED, fuzzRuns } from '../helpers/fuzz.ts'

const logit = fc.oneof(
  { weight: 6, arbitrary: fc.float({ min: -30, max: 30, noNaN: true }) },
  { weight: 1, arbitrary: fc.constantFrom(NaN, Infinity, -Infinity, 0, -0, 3.4e38, -3.4e38, 1e-45, 5) }
)
const row = fc.array(logit, { minLength: 1, maxLength: 300 }).map(values => Float32Array.from(values))

const settings = fc.record({
  temperature: fc.oneof(fc.constantFrom(0, Number.MIN_VALUE, 1e-310, 5e-307, 1e-300, 1e-7, 2), fc.double({ min: 0, max: 2, noNaN: true })),
  topP: fc.oneof(fc.constantFrom(0, Number.MIN_VALUE, 1e-12, 1), fc.double({ min: 0, max: 1, noNaN: true })),
  topK: fc.oneof(fc.constantFrom(0, 1, 2, Number.MAX_SAFE_INTEGER, 1e20), fc.nat({ max: 400 })),
})

t.test('any logits, any accepted settings: an integer id within the valid vocabulary', async t => {
  let cases = 0
  await assertHolds(t, fc.property(row, settings, fc.nat(), fc.integer(), (logits, params, cut, seed) => {
    cases++
    const validVocab = 1 + (cut % logits.length)
    const id = sample(logits, params, createRng(seed), validVocab)
    if (!Number.isInteger(id) || id < 0 || id >= validVocab) throw new Error(`sample returned ${id} for vocabulary ${validVocab}`)
    if (params.temperature === 0 || params.topK === 1) return id === argmax(logits, validVocab)
    return true
  }), fuzzRuns(3000, 2))
  t.comment(`sampler: ${cases} cases, seed ${FUZZ_SEED}`)
  t.pass('every draw was a valid id')
})

t.test('temperatures too small for 1/T decode greedily', async t => {
  const logits = Float32Array.of(0.5, 2, 1, 2, -1)
  for (const temperature of [Number.MIN_VALUE, 1e-310, 1e-308]) {
    for (const topP of [0, 0.5, 1]) {
      t.equal(sample(logits, { temperature, topP, topK: 0 }, createRng(1)), 1, `T=${temperature} top_p=${topP}`)
    }
  }
})
