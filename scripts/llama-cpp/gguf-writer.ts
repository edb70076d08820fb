// A streaming GGUF v3 writer: metadata and tensor infos first, then each
// tensor's data as the caller produces it, so a multi-gigabyte model never
// has to be in memory at once. Layout (ggml/include/gguf.h): magic, version,
// tensor count, metadata count, metadata, tensor infos (name, dims in ggml
// order, type, offset), zero padding to the alignment, then the data blob in
// which every tensor starts at an aligned offset (relative to the blob) and is
// zero-padded to the next one. llama.cpp rejects offsets that are not exactly
// that running sum, so they are computed here, never taken from the caller.
import fs from 'node:fs'
import {
  alignUp, GGML_TYPES, type GgmlTypeName, GGUF_DEFAULT_ALIGNMENT, GGUF_MAGIC, GGUF_VALUE_TYPE, GGUF_VERSION,
  type GgufMetadata, type GgufScalarType, type GgufValue, tensorBytes,
} from './gguf-format.ts'

export interface GgufTensorSpec {
  name: string
  type: GgmlTypeName
  /** ggml order: dims[0] is contiguous (a Hugging Face [out, in] weight is [in, out]). */
  dims: number[]
}

export interface GgufLayout {
  alignment: number
  /** Byte position of the data blob in the file. */
  dataOffset: number
  /** Each tensor's offset within the data blob, and its size without padding. */
  offsets: number[]
  sizes: number[]
  fileBytes: number
}

export interface WriteGgufOptions {
  metadata: GgufMetadata
  tensors: GgufTensorSpec[]
  /** Power of two; a value other than 32 is recorded as `general.alignment`. */
  alignment?: number
  /** The bytes of one tensor, asked for in order, one at a time. */
  data: (tensor: GgufTensorSpec, index: number) => Uint8Array
}

/** The header bytes and the data layout, without writing anything. */
export function ggufHeader (opts: Omit<WriteGgufOptions, 'data'>): { header: Uint8Array; layout: GgufLayout } {
  const alignment = opts.alignment ?? GGUF_DEFAULT_ALIGNMENT
  if (!Number.isInteger(alignment) || alignment <= 0 || (alignment & (alignment - 1)) !== 0) throw new Error(`GGUF alignment must be a power of two (got ${alignment})`)
  const metadata = withAlignment(opts.metadata, alignment)
  const keys = new Set<string>()
  for (const [key] of metadata) {
    if (keys.has(key)) throw new Error(`GGUF metadata key ${key} appears twice`)
    keys.add(key)
  }
  const names = new Set<string>()
  const w = new ByteWriter()
  w.bytes(new TextEncoder().encode(GGUF_MAGIC))
  w.u32(GGUF_VERSION)
  w.u64(BigInt(opts.tensors.length))
  w.u64(BigInt(metadata.length))
  for (const [key, value] of metadata) {
    w.string(key)
    w.u32(GGUF_VALUE_TYPE[value.type])
    writeValue(w, value)
  }
  const offsets: number[] = []
  const sizes: number[] = []
  let offset = 0
  for (const t of opts.tensors) {
    // ggml keeps names in a 64-byte buffer with its terminating zero.
    if (new TextEncoder().encode(t.name).length >= 64) throw new Error(`tensor name ${t.name} is longer than ggml's 63 bytes`)
    if (names.has(t.name)) throw new Error(`tensor ${t.name} appears twice`)
    names.add(t.name)
    const size = tensorBytes(t.type, t.dims)
    w.string(t.name)
    w.u32(t.dims.length)
    for (const d of t.dims) w.u64(BigInt(d))
    w.u32(GGML_TYPES[t.type].code)
    w.u64(BigInt(offset))
    offsets.push(offset)
    sizes.push(size)
    offset += alignUp(size, alignment)
  }
  const header = w.done()
  const dataOffset = alignUp(header.length, alignment)
  return { header, layout: { alignment, dataOffset, offsets, sizes, fileBytes: dataOffset + offset } }
}

/** Writes the file under a temporary name and renames it when complete, so a cached model is never a truncated one. */
export function writeGguf (file: string, opts: WriteGgufOptions): GgufLayout {
  const { header, layout } = ggufHeader(opts)
  const partial = `${file}.partial`
  const fd = fs.openSync(partial, 'w')
  try {
    let pos = 0
    const put = (bytes: Uint8Array): void => {
      for (let done = 0; done < bytes.length;) done += fs.writeSync(fd, bytes, done, bytes.length - done, pos + done)
      pos += bytes.length
    }
    put(header)
    put(new Uint8Array(layout.dataOffset - header.length))
    opts.tensors.forEach((t, i) => {
      const bytes = opts.data(t, i)
      if (bytes.length !== layout.sizes[i]) throw new Error(`tensor ${t.name}: ${t.type} [${t.dims}] takes ${layout.sizes[i]} bytes, got ${bytes.length}`)
      put(bytes)
      put(new Uint8Array(alignUp(bytes.length, layout.alignment) - bytes.length))
    })
    if (pos !== layout.fileBytes) throw new Error(`GGUF writer: wrote ${pos} bytes, expected ${layout.fileBytes}`)
  } catch (err) {
    fs.closeSync(fd)
    fs.rmSync(partial, { force: true })
    throw err
  }
  fs.closeSync(fd)
  fs.renameSync(partial, file)
  return layout
}

function withAlignment (metadata: GgufMetadata, alignment: number): GgufMetadata {
  const existing = metadata.find(([key]) => key === 'general.alignment')
  if (existing) {
    const [, v] = existing
    if (v.type !== 'u32' || v.value !== alignment) throw new Error(`general.alignment must be the u32 ${alignment} the data is laid out with`)
    return metadata
  }
  return alignment === GGUF_DEFAULT_ALIGNMENT ? metadata : [...metadata, ['general.alignment', { type: 'u32', value: alignment }]]
}

function writeValue (w: ByteWriter, v: GgufValue): void {
  if (v.type === 'array') {
    w.u32(GGUF_VALUE_TYPE[v.of])
    w.u64(BigInt(v.value.length))
    for (const item of v.value) writeScalar(w, v.of, item)
  } else {
    writeScalar(w, v.type, v.value)
  }
}

function writeScalar (w: ByteWriter, type: GgufScalarType, value: number | bigint | boolean | string): void {
  const num = (): number => {
    if (typeof value !== 'number') throw new Error(`GGUF ${type} value must be a number (got ${typeof value})`)
    return value
  }
  switch (type) {
    case 'u8': w.view(1).setUint8(0, num()); break
    case 'i8': w.view(1).setInt8(0, num()); break
    case 'u16': w.view(2).setUint16(0, num(), true); break
    case 'i16': w.view(2).setInt16(0, num(), true); break
    case 'u32': w.view(4).setUint32(0, num(), true); break
    case 'i32': w.view(4).setInt32(0, num(), true); break
    case 'f32': w.view(4).setFloat32(0, num(), true); break
    case 'f64': w.view(8).setFloat64(0, num(), true); break
    case 'u64': w.view(8).setBigUint64(0, BigInt(value as bigint | number), true); break
    case 'i64': w.view(8).setBigInt64(0, BigInt(value as bigint | number), true); break
    case 'bool': w.view(1).setInt8(0, value ? 1 : 0); break
    case 'string':
      if (typeof value !== 'string') throw new Error(`GGUF string value must be a string (got ${typeof value})`)
      w.string(value)
      break
  }
}

/** A growable little-endian byte buffer for the header. */
class ByteWriter {
  #buf = new Uint8Array(4096)
  #len = 0

  view (n: number): DataView {
    this.#reserve(n)
    const v = new DataView(this.#buf.buffer, this.#len, n)
    this.#len += n
    return v
  }

  bytes (b: Uint8Array): void {
    this.#reserve(b.length)
    this.#buf.set(b, this.#len)
    this.#len += b.length
  }

  u32 (n: number): void { this.view(4).setUint32(0, n, true) }
  u64 (n: bigint): void { this.view(8).setBigUint64(0, n, true) }

  /** GGUF strings: u64 byte length, then UTF-8 without a terminating zero. */
  string (s: string): void {
    const b = new TextEncoder().encode(s)
    this.u64(BigInt(b.length))
    this.bytes(b)
  }

  done (): Uint8Array {
    return this.#buf.slice(0, this.#len)
  }

  #reserve (n: number): void {
    if (this.#len + n <= this.#buf.length) return
    const next = new Uint8Array(Math.max(this.#buf.length * 2, this.#len + n))
    next.set(this.#buf.subarray(0, this.#len))
    this.#buf = next
  }
}
