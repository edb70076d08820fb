// ggml's Q4_0 block format, written from the GGUF/ggml spec: blocks of 32
// weights, an fp16 scale d and 16 bytes of 4-bit codes; weight j of a block is
// (code - 8) * d, codes 0..15 in the low nibbles of the 16 bytes and 16..31 in
// the high nibbles (unlike chatd's ONNX int4, which packs neighbours together).
// The scale is the block's signed extreme over -8, so the extreme itself lands
// exactly on code 0 and the other side of zero gets codes up to 15.
//
// Every step is rounded to float32 (Math.fround) as the C reference does, so
// for the same float input this gives the same bytes as llama-quantize; the
// model builder uses that to check that llama.cpp's model holds the weights
// chatd's model was built from.

export const QK4_0 = 32
export const Q4_0_BLOCK_BYTES = 2 + QK4_0 / 2

const f16 = new Float16Array(1)
const f16Bits = new Uint16Array(f16.buffer)

/** Quantizes `x` (a whole number of 32-value blocks, row-major) to Q4_0 blocks. */
export function quantizeQ4_0 (x: Float32Array): Uint8Array {
  if (x.length % QK4_0 !== 0) throw new Error(`Q4_0 needs a multiple of ${QK4_0} values (got ${x.length})`)
  const blocks = x.length / QK4_0
  const out = new Uint8Array(blocks * Q4_0_BLOCK_BYTES)
  const half = QK4_0 / 2
  for (let b = 0; b < blocks; b++) {
    const base = b * QK4_0
    let amax = 0
    let max = 0
    for (let j = 0; j < QK4_0; j++) {
      const v = x[base + j]
      // Strictly greater: the first of equal magnitudes wins, as in the reference.
      if (amax < Math.abs(v)) {
        amax = Math.abs(v)
        max = v
      }
    }
    const d = Math.fround(max / -8)
    const id = d !== 0 ? Math.fround(1 / d) : 0
    const o = b * Q4_0_BLOCK_BYTES
    f16[0] = d
    out[o] = f16Bits[0] & 0xff
    out[o + 1] = f16Bits[0] >> 8
    for (let j = 0; j < half; j++) {
      const lo = Math.min(15, Math.trunc(Math.fround(Math.fround(x[base + j] * id) + 8.5)))
      const hi = Math.min(15, Math.trunc(Math.fround(Math.fround(x[base + half + j] * id) + 8.5)))
      out[o + 2 + j] = lo | (hi << 4)
    }
  }
  return out
}

/** The float32 values Q4_0 blocks stand for. */
export function dequantizeQ4_0 (bytes: Uint8Array): Float32Array {
  if (bytes.length % Q4_0_BLOCK_BYTES !== 0) throw new Error(`Q4_0 data must be whole ${Q4_0_BLOCK_BYTES}-byte blocks (got ${bytes.length} bytes)`)
  const blocks = bytes.length / Q4_0_BLOCK_BYTES
  const out = new Float32Array(blocks * QK4_0)
  const half = QK4_0 / 2
  for (let b = 0; b < blocks; b++) {
    const o = b * Q4_0_BLOCK_BYTES
    f16Bits[0] = bytes[o] | (bytes[o + 1] << 8)
    const d = f16[0]
    for (let j = 0; j < half; j++) {
      const q = bytes[o + 2 + j]
      out[b * QK4_0 + j] = ((q & 0x0f) - 8) * d
      out[b * QK4_0 + half + j] = ((q >> 4) - 8) * d
    }
  }
  return out
}
