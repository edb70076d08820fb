// The request's logit adjustments against OpenAI's definitions, computed by hand.
import t from 'tap'
import { adjustLogits, adjustsLogits, TokenCounts } from '../../../../src/engine/onnx/sampling/logit-adjust.ts'
import { argmax } from '../../../../src/engine/onnx/sampling/sampler.ts'

t.test('penalties: logit -= count * frequency + (count > 0) * presence, over generated tokens only', async t => {
  const logits = new Float32Array([5, 4, 3, 2])
  const counts = new TokenCounts()
  for (const id of [0, 0, 0, 2]) counts.add(id)
  adjustLogits(logits, 4, { frequencyPenalty: 0.5, presencePenalty: 1, temperature: 1 }, counts)
  t.same([...logits], [5 - 1.5 - 1, 4, 3 - 0.5 - 1, 2])
})

t.test('logit_bias adds to the named ids; -100 removes the greedy token, +100 forces one', async t => {
  const logits = new Float32Array([9, 8, 1, 0])
  adjustLogits(logits, 4, { logitBias: new Map([[0, -100]]), temperature: 0 }, new TokenCounts())
  t.equal(argmax(logits), 1)
  adjustLogits(logits, 4, { logitBias: new Map([[3, 100]]), temperature: 0 }, new TokenCounts())
  t.equal(argmax(logits), 3)
  const padded = new Float32Array([1, 2, 3])
  adjustLogits(padded, 2, { logitBias: new Map([[2, 50]]), temperature: 0 }, new TokenCounts())
  t.equal(padded[2], 3, 'ids past the valid vocabulary are left alone')
})

t.test('min_p keeps exactly the tokens whose probability is at least min_p times the top one\'s', async t => {
  const T = 0.7
  const raw = [2, 1.5, 0.2, -3, 1.9]
  const logits = new Float32Array(raw)
  adjustLogits(logits, raw.length, { minP: 0.3, temperature: T }, new TokenCounts())
  // Reference from the probabilities themselves.
  const p = raw.map(l => Math.exp(l / T))
  const top = Math.max(...p)
  t.same([...logits].map(Number.isFinite), p.map(x => x / top >= 0.3))
  const greedy = new Float32Array(raw)
  adjustLogits(greedy, raw.length, { minP: 0.99, temperature: 0 }, new TokenCounts())
  t.same([...greedy], [...new Float32Array(raw)], 'greedy decoding is unchanged by min_p')
})

t.test('a request without adjustments leaves the row alone', async t => {
  t.equal(adjustsLogits({ temperature: 1 }), false)
  t.equal(adjustsLogits({ temperature: 1, presencePenalty: 0, frequencyPenalty: 0, minP: 0, logitBias: new Map() }), false)
  t.equal(adjustsLogits({ temperature: 1, minP: 0.1 }), true)
})
