// The device the tests load their models on. Kept apart from webgpu.ts (which imports tap) so
// scripts that share the test helpers, such as scripts/load.ts, can read it too.

/**
 * The CPU, or WebGPU when CHATD_TEST_DEVICE=webgpu, which the files in the on-webgpu/ folders set
 * before they run a CPU test file again (`runOnWebgpu` in webgpu.ts), so CI runs those tests on
 * lavapipe too. Servers a test starts as processes of their own inherit the variable.
 */
export function testDevice (): 'cpu' | 'webgpu' {
  return process.env.CHATD_TEST_DEVICE === 'webgpu' ? 'webgpu' : 'cpu'
}
