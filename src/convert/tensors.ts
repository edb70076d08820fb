// Numeric helpers for the model builder: float16 conversion and the int4 block
// quantization that onnxruntime's com.microsoft MatMulNBits operator reads.

/** A dense row-major float32 tensor. */
export interface Tensor {
  shape: number[]
  data: Float32Array
}

export function toFloat16Bytes (data: Float32Array): Uint8Array {
  const half = new Float16Array(data)
  return new Uint8Array(half.buffer, half.byteOffset, half.byteLength)
}

export function toFloat32Bytes (data: Float32Array): Uint8Array {
  return new Uint8Array(data.buffer, data.byteOffset, data.byteLength)
}

/** Transposes a [rows, cols] matrix to [cols, rows]. */
export function transpose2d (t: Tensor): Tensor {
  const [rows, cols] = t.shape
  const out = new Float32Array(rows * cols)
  const src = t.data
  // Blocked so both reads and writes stay in cache for large matrices.
  const B = 64
  for (let r0 = 0; r0 < rows; r0 += B) {
    for (let c0 = 0; c0 < cols; c0 += B) {
      const rEnd = Math.min(r0 + B, rows)
      const cEnd = Math.min(c0 + B, cols)
      for (let r = r0; r < rEnd; r++) {
        for (let c = c0; c < cEnd; c++) out[c * rows + r] = src[r * cols + c]
      }
    }
  }
  return { shape: [cols, rows], data: out }
}

/** Stacks matrices that share their column count along the rows. */
export function concatRows (parts: Tensor[]): Tensor {
  if (parts.length === 1) return parts[0]
  const cols = parts[0].shape[parts[0].shape.length - 1]
  const rows = parts.reduce((n, p) => n + p.shape[0], 0)
  const data = new Float32Array(rows * cols)
  let offset = 0
  for (const p of parts) {
    data.set(p.data, offset)
    offset += p.data.length
  }
  return { shape: [rows, cols], data }
}

export function concat1d (parts: Float32Array[]): Float32Array {
  const out = new Float32Array(parts.reduce((n, p) => n + p.length, 0))
  let offset = 0
  for (const p of parts) {
    out.set(p, offset)
    offset += p.length
  }
  return out
}

/** Block size along K when none is asked for: what onnx-community's q4 exports and llama.cpp's Q4_0 use. */
export const INT4_BLOCK_SIZE = 32

/**
 * Block sizes MatMulNBits accepts (a power of two, at least 16). Larger blocks
 * mean fewer scales to read per step (block 32 spends 1 of every 5 bits on
 * them) at some cost in precision.
 */
export const INT4_BLOCK_SIZES = [16, 32, 64, 128, 256] as const

export interface Int4Weight {
  /** Rows of the weight = output features (MatMulNBits' N). */
  n: number
  /** Columns = input features (MatMulNBits' K). */
  k: number
  blockSize: number
  blocksPerRow: number
  /** [N, blocksPerRow, blockSize/2] bytes; element 2j in the low nibble, 2j+1 in the high. */
  packed: Uint8Array
  /** [N * blocksPerRow] per-block scales. */
  scales: Float32Array
}

/**
 * Symmetric 4-bit quantization per block of `blockSize` values along K. Values are stored
 * with the operator's default zero point of 8, so w ~= (q - 8) * scale.
 * `weight` has the Hugging Face Linear layout [out_features, in_features].
 *
 * The scale follows llama.cpp's Q4_0 rule: the block's value of largest
 * magnitude maps to -8 exactly (scale = that value / -8), so all 16 levels are
 * used; a scale of amax / 7 would leave level 0 unused and cost about 12% more
 * error at every block size (measured on Gaussian and heavy-tailed weights).
 * The opposite extreme, when it is as large, clips to +7 as in Q4_0.
 */
export function quantizeInt4 (weight: Tensor, blockSize: number = INT4_BLOCK_SIZE): Int4Weight {
  if (!(INT4_BLOCK_SIZES as readonly number[]).includes(blockSize)) throw new Error(`int4 block size must be one of ${INT4_BLOCK_SIZES.join(', ')} (got ${blockSize})`)
  const [n, k] = weight.shape
  const blocksPerRow = Math.ceil(k / blockSize)
  const bytesPerBlock = blockSize / 2
  const packed = new Uint8Array(n * blocksPerRow * bytesPerBlock)
  const scales = new Float32Array(n * blocksPerRow)
  const w = weight.data
  for (let row = 0; row < n; row++) {
    for (let b = 0; b < blocksPerRow; b++) {
      const start = row * k + b * blockSize
      const end = row * k + Math.min((b + 1) * blockSize, k)
      let extreme = 0
      for (let i = start; i < end; i++) {
        if (Math.abs(w[i]) > Math.abs(extreme)) extreme = w[i]
      }
      const scale = Math.fround(extreme / -8)
      const inv = scale !== 0 ? 1 / scale : 0
      scales[row * blocksPerRow + b] = scale
      const out = (row * blocksPerRow + b) * bytesPerBlock
      for (let j = 0; j < blockSize; j++) {
        const i = start + j
        // K is padded up to a whole block with zeros (q = 8).
        const q = i < end ? Math.max(0, Math.min(15, Math.round(w[i] * inv) + 8)) : 8
        if (j % 2 === 0) packed[out + (j >> 1)] = q
        else packed[out + (j >> 1)] |= q << 4
      }
    }
  }
  return { n, k, blockSize, blocksPerRow, packed, scales }
}

export interface Int8Weight {
  /** [K, N] (MatMul's B layout): input features by output features. */
  values: Int8Array
  /** One per output feature, [N]: w ~= q * scale. */
  scales: Float32Array
}

/**
 * Symmetric 8-bit quantization per output feature (per column of B), the form
 * com.microsoft DynamicQuantizeMatMul takes: scale = amax / 127. `weight` has the
 * Hugging Face Linear layout [out_features, in_features]; the result is
 * transposed to [in_features, out_features].
 */
export function quantizeInt8 (weight: Tensor): Int8Weight {
  const [n, k] = weight.shape
  const w = weight.data
  const values = new Int8Array(k * n)
  const scales = new Float32Array(n)
  for (let row = 0; row < n; row++) {
    let amax = 0
    for (let i = row * k; i < (row + 1) * k; i++) amax = Math.max(amax, Math.abs(w[i]))
    const scale = Math.fround(amax / 127)
    scales[row] = scale
    const inv = scale !== 0 ? 1 / scale : 0
    for (let col = 0; col < k; col++) values[col * n + row] = Math.max(-127, Math.min(127, Math.round(w[row * k + col] * inv)))
  }
  return { values, scales }
}

/** The float weight an Int4Weight stands for, in [N, K] layout (for tests). */
export function dequantizeInt4 (q: Int4Weight): Tensor {
  const data = new Float32Array(q.n * q.k)
  const bytesPerBlock = q.blockSize / 2
  for (let row = 0; row < q.n; row++) {
    for (let col = 0; col < q.k; col++) {
      const b = Math.floor(col / q.blockSize)
      const j = col % q.blockSize
      const byte = q.packed[(row * q.blocksPerRow + b) * bytesPerBlock + (j >> 1)]
      const nibble = j % 2 === 0 ? byte & 0x0f : byte >> 4
      data[row * q.k + col] = (nibble - 8) * q.scales[row * q.blocksPerRow + b]
    }
  }
  return { shape: [q.n, q.k], data }
}
