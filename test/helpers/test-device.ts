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

/**
 * The device a test computes its expected answers on. A test that compares what the engine does
 * under some condition (batched, cached, within a budget) with what it does plainly computes the
 * plain side on the CPU, so in an on-webgpu/ twin it checks what WebGPU must hold to, the CPU
 * provider's tokens, and lavapipe (whose every token costs ~15x the CPU's) runs only the side under
 * test. Int4 builds (`dtype` q4) are the exception: chatd's compute with int8 activations on the CPU
 * and in float on a GPU, by design, so their reference runs on the tests' device.
 */
export function referenceDevice (dtype = 'fp32'): 'cpu' | 'webgpu' {
  return dtype === 'q4' ? testDevice() : 'cpu'
}

/**
 * How much of a test's work runs on the tests' device: `cpu` on the CPU, `webgpu` in an on-webgpu/
 * twin. Lavapipe, the software renderer CI's twins run on, decodes ~20x slower a token than the CPU
 * provider, so a twin asks fewer tokens, seeds or waves where the CPU run already covers the rest;
 * the caller says in a comment what the CPU run keeps.
 */
export function perDevice<T> (amounts: { cpu: T, webgpu: T }): T {
  return amounts[testDevice()]
}
