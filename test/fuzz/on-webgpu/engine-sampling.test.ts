// ../engine-sampling.test.ts again, the server's model on WebGPU (lavapipe in CI): the first
// 20 of the CPU run's 40 cases (the same fast-check seed, so the same cases in the same order),
// for CI's time (a software renderer decodes ~25x slower than the CPU here).
import { runOnWebgpu } from '../../helpers/webgpu.ts'
process.env.CHATD_FUZZ_RUNS ??= '400' // fuzzRuns(40, 0.05): 400 x 0.05 = 20 runs
await runOnWebgpu(import.meta.url, '../engine-sampling.test.ts')
