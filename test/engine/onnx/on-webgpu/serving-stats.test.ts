// ../scheduler/serving-stats.test.ts again, every model it loads on WebGPU (lavapipe in CI).
import { runOnWebgpu } from '../../../helpers/webgpu.ts'
await runOnWebgpu(import.meta.url, '../scheduler/serving-stats.test.ts')
