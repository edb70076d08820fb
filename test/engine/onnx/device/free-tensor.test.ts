// A finished step's KV cache is freed at once, not left to the garbage
// collector, and freeing never takes data from a buffer someone else views.
import t from 'tap'
import { DecoderSession } from '../../../../src/engine/onnx/device/decoder-session.ts'
import { readModelDir } from '../../../../src/engine/onnx/model-dir.ts'
import { freeTensor, ort } from '../../../../src/engine/onnx/device/ort.ts'
import { randomModelDir } from '../../../helpers/models.ts'

t.test('a tensor that owns its buffer releases the memory when freed', async t => {
  const data = new Float32Array(1 << 16).fill(1)
  const tensor = new ort.Tensor('float32', data, [1 << 16])
  freeTensor(tensor)
  t.equal(data.buffer.detached, true, 'buffer detached: its memory is released now')
  t.equal(data.length, 0)
})

t.test('a tensor that views part of a buffer is only disposed', async t => {
  const shared = new Float32Array(1024).fill(2)
  const tensor = new ort.Tensor('float32', shared.subarray(0, 512), [512])
  freeTensor(tensor)
  t.equal(shared.buffer.detached, false)
  t.equal(shared[1023], 2, 'the rest of the buffer keeps its data')
})

t.test('disposeCache frees the cache a step returned; the next step still runs on its own output', async t => {
  // A graph that returns the whole cache each step (the onnx-community signature): the one whose outputs chain.
  const session = await DecoderSession.load(readModelDir(randomModelDir('llama', 'int4', 7, 'concat'), 'q4'), { device: 'cpu', threads: 1 })
  t.teardown(() => session.close())
  const ids = [3, 4, 5, 6]
  const first = await session.forward({
    batch: 1, inputIds: [ids], attentionMask: [ids.map(() => 1)], positionIds: [ids.map((_, i) => i)], past: session.emptyCache(1), logitsToKeep: 1,
  })
  const second = await session.forward({
    batch: 1, inputIds: [[7]], attentionMask: [[1, 1, 1, 1, 1]], positionIds: [[4]], past: first.present, logitsToKeep: 1,
  })
  const buffers = Object.values(first.present.tensors).map(x => (x.data as Float32Array).buffer as ArrayBuffer)
  t.ok(buffers.every(b => b.byteLength > 0), 'the step output owns real buffers')
  DecoderSession.disposeCache(first.present)
  t.ok(buffers.every(b => b.detached), 'every tensor of the old cache is released')
  const live = Object.values(second.present.tensors)
  t.ok(live.every(x => !((x.data as Float32Array).buffer as ArrayBuffer).detached && x.dims[2] === 5), 'the new cache is intact')
  const third = await session.forward({
    batch: 1, inputIds: [[8]], attentionMask: [[1, 1, 1, 1, 1, 1]], positionIds: [[5]], past: second.present, logitsToKeep: 1,
  })
  t.ok(Number.isFinite(third.logits[0]), 'a step on the surviving cache runs')
  DecoderSession.disposeCache(second.present)
  DecoderSession.disposeCache(third.present)
})
