// ../usage-e2e.test.ts again, the server's model on WebGPU (lavapipe in CI).
import { runOnWebgpu } from '../../helpers/webgpu.ts'
await runOnWebgpu(import.meta.url, '../usage-e2e.test.ts')
