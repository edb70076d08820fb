// Run as a child process by webgpu.ts: opens a WebGPU session on a two-node
// graph and runs it once, with whatever Vulkan drivers its environment allows.
// Prints "webgpu ok" and exits 0 when the result is right; else the error, exit 1.
import { ort } from './ort.ts'
import { PROBE_MODEL } from './probe-model.ts'

try {
  const session = await ort.InferenceSession.create(PROBE_MODEL, { executionProviders: ['webgpu'], logSeverityLevel: 3 })
  const out = await session.run({ x: new ort.Tensor('float32', Float32Array.of(1, 2, 3, 4), [4]) })
  const y = Array.from(out.y.data as Float32Array)
  if (y.join(',') !== '2,4,6,8') throw new Error(`the probe graph computed ${y.join(',')} instead of 2,4,6,8`)
  await session.release()
  console.log('webgpu ok')
} catch (err) {
  console.log((err as Error).message.split('\n')[0])
  process.exitCode = 1
}
