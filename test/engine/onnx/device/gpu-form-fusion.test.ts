// What onnxruntime's WebGPU provider makes of the GPU form: a decode step on a GPU is bound by
// the host's cost of dispatching each kernel (docs/performance.md, "On a GPU: WebGPU"), so the
// form is written for the provider's own fusions. Its optimized graph, as the session saves it,
// says which nodes it runs. (That the fused graph gives the CPU provider's tokens:
// webgpu-exactness.test.ts.)
import fs from 'node:fs'
import path from 'node:path'
import t from 'tap'
import { decodeModel } from '../../../../src/convert/onnx-proto.ts'
import { readModelDir } from '../../../../src/engine/onnx/model-dir.ts'
import { randomCaptureStepModelDir, randomGpuFormModelDir } from '../../../helpers/models.ts'
import { needWebgpu } from '../../../helpers/webgpu.ts'

/** The node types of the graph a session on `provider` runs, and how many of each. */
async function optimizedOps (onnxPath: string, provider: 'webgpu' | 'cpu', dir: string): Promise<Record<string, number>> {
  const { default: ort } = await import('onnxruntime-node')
  const saved = path.join(dir, `optimized-${provider}.onnx`)
  // graphOptimizationLevel 'all', as the engine's sessions (src/engine/onnx/device/providers.ts).
  const session = await ort.InferenceSession.create(onnxPath, { executionProviders: [provider], graphOptimizationLevel: 'all', logSeverityLevel: 3, optimizedModelFilePath: saved })
  await session.release()
  const ops: Record<string, number> = {}
  for (const node of decodeModel(fs.readFileSync(saved)).graph.node) ops[node.op_type] = (ops[node.op_type] ?? 0) + 1
  return ops
}

t.test('the GPU form (int4) on WebGPU: each layer\'s norm, gate and up projections and SiLU(gate) * up run as one MatMulNBitsMlp', async t => {
  if (!await needWebgpu(t)) return
  const model = readModelDir(randomGpuFormModelDir('int4'), 'q4')
  const dir = t.testdir()
  const gpu = await optimizedOps(model.onnxPath, 'webgpu', dir)
  t.equal(gpu.MatMulNBitsMlp, model.numLayers, 'one fused MLP node a layer')
  t.equal((gpu.Sigmoid ?? 0) + (gpu.QuickGelu ?? 0), 0, 'no activation node left beside it')
  t.equal(gpu.MatMulNBits, 3 * model.numLayers + 1, 'the other projections, q/k/v, o and down a layer, and the output head')
  // The file holds no provider's own node: the CPU provider runs the projections as written.
  const cpu = await optimizedOps(model.onnxPath, 'cpu', dir)
  t.equal(cpu.MatMulNBitsMlp ?? 0, 0, 'the CPU provider fuses nothing of the kind')
  t.equal(cpu.MatMulNBits, 5 * model.numLayers + 1, 'q/k/v, o, gate, up and down a layer apart on the CPU, and the output head')
})

t.test('the capture step on WebGPU: each layer hands its packed q/k/v to GroupQueryAttention, which rotates them itself (one fused split, rotary and cache write)', async t => {
  if (!await needWebgpu(t)) return
  const model = readModelDir(randomCaptureStepModelDir(), 'q4')
  const gpu = await optimizedOps(model.stepOnnxPath as string, 'webgpu', t.testdir())
  t.equal(gpu.GroupQueryAttention, model.numLayers)
  t.equal(gpu.Split ?? 0, 0, 'no Split of the projection')
  t.equal(gpu.RotaryEmbedding, 1, 'one RotaryEmbedding, for cache_delta\'s keys of every layer at once')
  const attention = decodeModel(fs.readFileSync(model.stepOnnxPath as string)).graph.node.filter(n => n.op_type === 'GroupQueryAttention')
  for (const node of attention) {
    t.same(node.input.slice(1, 3), ['', ''], 'the packed projection as the query, no key or value apart')
    t.equal(node.attribute.find(a => a.name === 'do_rotary')?.i, 1, 'the operator rotates')
  }
})
