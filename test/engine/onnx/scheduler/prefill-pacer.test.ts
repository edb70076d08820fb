// The prompt-chunk size follows the engine's measured timings.
import t from 'tap'
import { PrefillPacer } from '../../../../src/engine/onnx/scheduler/prefill-pacer.ts'

t.test('uses the initial size until it has both timings', async t => {
  const pacer = new PrefillPacer(16)
  t.equal(pacer.chunkSize(), 16)
  pacer.recordPrefill(64, 1000) // no decode timing yet: nothing to subtract
  t.equal(pacer.chunkSize(), 16)
  pacer.recordDecode(90)
  t.equal(pacer.chunkSize(), 16)
})

t.test('keeps a chunk within about 1.75 decode steps (CPU-like timings)', async t => {
  const pacer = new PrefillPacer(16)
  pacer.recordDecode(90)
  pacer.recordPrefill(64, 90 + 64 * 5) // 5 ms per prompt token beyond the weight pass
  // (1.75 - 1) * 90 / 5 = 13.5 -> 13 tokens: 90 + 13 * 5 = 155 ms, 1.72 steps.
  t.equal(pacer.chunkSize(), 13)
})

t.test('cheap prompt tokens (GPU-like) give large chunks, capped; dear ones give the minimum', async t => {
  const gpu = new PrefillPacer(256)
  gpu.recordDecode(10)
  gpu.recordPrefill(512, 12)
  t.equal(gpu.chunkSize(), 512)
  const slow = new PrefillPacer(16)
  slow.recordDecode(50)
  slow.recordPrefill(16, 50 + 16 * 400)
  t.equal(slow.chunkSize(), 4)
})

t.test('a chunk riding in a decode step (mixed batches) is judged against a step of as many decoding rows', async t => {
  const pacer = new PrefillPacer(16)
  pacer.recordDecode(30, 1) // one row decoding alone
  pacer.recordDecode(45, 3) // three rows
  // Six prompt tokens beside three decoding rows cost 4.5 ms each beyond the three rows' step.
  pacer.recordPrefill(6, 45 + 6 * 4.5, 3)
  // The mixed run is the streams' whole gap, given 1 + 1.75 steps: 1.75 * 45 / 4.5 = 17.5 -> 17
  // tokens beside three rows. Against the one-row step (30 ms) the same run would have read as
  // 7 ms per token, and the chunk as 1.75 * 45 / 7 = 11.
  t.equal(pacer.chunkSize(3), 17)
  t.equal(pacer.chunkSize(1), 11, 'beside one row: 1.75 * 30 / 4.5')
  t.equal(pacer.chunkSize(2), 12, 'no step of two rows measured: the latest steps (33 ms on average) stand in')
  t.equal(pacer.chunkSize(), 5, 'a run of its own pays the weight pass too: (1.75 - 1) * 33 / 4.5')
})
