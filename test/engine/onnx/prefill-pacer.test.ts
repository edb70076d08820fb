// The prompt-chunk size follows the engine's measured timings.
import t from 'tap'
import { PrefillPacer } from '../../../src/engine/onnx/prefill-pacer.ts'

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
