// onnxruntime-node, loaded once per thread with the settings chatd relies on.
// Which execution provider a session runs on is providers.ts's choice.
import ort from 'onnxruntime-node'

// onnxruntime-node 1.30's native binding reads a float16 input as zero bytes
// when its data is a Float16Array (N-API has no float16 typed array), and
// onnxruntime-common picks Float16Array for float16 tensors whenever the
// runtime has one (Node 24 does). Hiding Float16Array during the library's
// one-time typed-array check makes float16 tensors Uint16Array, which the
// binding reads correctly, both for the inputs we feed and the outputs it returns.
{
  const realFloat16Array = globalThis.Float16Array
  ;(globalThis as { Float16Array?: unknown }).Float16Array = undefined
  try {
    void new ort.Tensor('float32', new Float32Array(1), [1])
  } finally {
    ;(globalThis as { Float16Array?: unknown }).Float16Array = realFloat16Array
  }
}

export { ort }
export type OrtTensor = ort.Tensor

/**
 * Disposes a CPU tensor and frees its memory at once. A dropped tensor's
 * ArrayBuffer waits for the garbage collector, and a decode step replaces the
 * whole KV cache (onnxruntime's outputs are copied into fresh buffers), so
 * several steps' caches used to pile up: at 8 streams about 2.5x the live
 * cache. The buffer is detached (transfer(0) releases its memory now) only
 * when this tensor's data is the whole of it, so no other view can lose data.
 */
export function freeTensor (tensor: OrtTensor): void {
  const data = tensor.location === 'cpu' ? tensor.data : null
  tensor.dispose()
  if (!ArrayBuffer.isView(data)) return
  const buffer = data.buffer
  if (!(buffer instanceof ArrayBuffer) || buffer.detached || buffer.byteLength === 0) return
  if (data.byteOffset !== 0 || data.byteLength !== buffer.byteLength) return
  buffer.transfer(0)
}

/** A float16 tensor's raw bits (Uint16Array) widened to float32. */
export function float16BitsToFloat32 (bits: Uint16Array): Float32Array {
  const half = new Float16Array(bits.buffer, bits.byteOffset, bits.length)
  return Float32Array.from(half)
}
