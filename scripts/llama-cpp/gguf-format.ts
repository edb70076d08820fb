// The pieces of the GGUF v3 format (ggml/include/gguf.h in llama.cpp) that the
// writer and the reader share: value type codes and the ggml tensor types the
// comparison model uses, with their block sizes.

export const GGUF_MAGIC = 'GGUF'
export const GGUF_VERSION = 3
/** Without a `general.alignment` key, each tensor's data starts at a multiple of 32 bytes. */
export const GGUF_DEFAULT_ALIGNMENT = 32

/** Value type codes of metadata values (enum gguf_type). */
export const GGUF_VALUE_TYPE = {
  u8: 0,
  i8: 1,
  u16: 2,
  i16: 3,
  u32: 4,
  i32: 5,
  f32: 6,
  bool: 7,
  string: 8,
  array: 9,
  u64: 10,
  i64: 11,
  f64: 12,
} as const
export type GgufScalarType = Exclude<keyof typeof GGUF_VALUE_TYPE, 'array'>

export type GgufValue =
  | { type: 'u8' | 'i8' | 'u16' | 'i16' | 'u32' | 'i32' | 'f32' | 'f64'; value: number }
  | { type: 'u64' | 'i64'; value: bigint }
  | { type: 'bool'; value: boolean }
  | { type: 'string'; value: string }
  | { type: 'array'; of: GgufScalarType; value: Array<number | bigint | boolean | string> }

/** Metadata in file order; keys are unique. */
export type GgufMetadata = Array<[string, GgufValue]>

export const gguf = {
  u32: (value: number): GgufValue => ({ type: 'u32', value }),
  i32: (value: number): GgufValue => ({ type: 'i32', value }),
  f32: (value: number): GgufValue => ({ type: 'f32', value }),
  u64: (value: bigint): GgufValue => ({ type: 'u64', value }),
  bool: (value: boolean): GgufValue => ({ type: 'bool', value }),
  str: (value: string): GgufValue => ({ type: 'string', value }),
  arr: (of: GgufScalarType, value: Array<number | bigint | boolean | string>): GgufValue => ({ type: 'array', of, value }),
}

/** ggml tensor types (enum ggml_type): code, values per block, bytes per block. */
export const GGML_TYPES = {
  F32: { code: 0, blockSize: 1, blockBytes: 4 },
  F16: { code: 1, blockSize: 1, blockBytes: 2 },
  Q4_0: { code: 2, blockSize: 32, blockBytes: 18 },
  Q8_0: { code: 8, blockSize: 32, blockBytes: 34 },
  Q6_K: { code: 14, blockSize: 256, blockBytes: 210 },
  BF16: { code: 30, blockSize: 1, blockBytes: 2 },
} as const
export type GgmlTypeName = keyof typeof GGML_TYPES

export function ggmlTypeName (code: number): GgmlTypeName | undefined {
  return (Object.keys(GGML_TYPES) as GgmlTypeName[]).find(name => GGML_TYPES[name].code === code)
}

/**
 * Bytes of a tensor's data. `dims` is in ggml order: dims[0] is the contiguous
 * one (a Hugging Face [out, in] matrix is [in, out] here), and it must be a
 * whole number of blocks, as every row is stored as whole blocks.
 */
export function tensorBytes (type: GgmlTypeName, dims: number[]): number {
  const t = GGML_TYPES[type]
  if (dims.length === 0 || dims.length > 4) throw new Error(`a ggml tensor has 1 to 4 dimensions (got ${dims.length})`)
  if (dims[0] % t.blockSize !== 0) throw new Error(`${type} rows must be a multiple of ${t.blockSize} values (got ${dims[0]})`)
  const count = dims.reduce((a, b) => a * b, 1)
  return (count / t.blockSize) * t.blockBytes
}

export function alignUp (n: number, alignment: number): number {
  return Math.ceil(n / alignment) * alignment
}
