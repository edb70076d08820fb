// A minimal GGUF v3 reader: metadata, tensor infos and one tensor's bytes.
// The model builder uses it to check what llama-quantize wrote (tensor types,
// and that the quantized weights are the seeded ones); it reads the header in
// chunks, so a large model costs only what is asked for.
import fs from 'node:fs'
import { alignUp, ggmlTypeName, type GgmlTypeName, GGUF_DEFAULT_ALIGNMENT, GGUF_MAGIC, GGUF_VALUE_TYPE, tensorBytes } from './gguf-format.ts'

export interface GgufTensorInfo {
  name: string
  dims: number[]
  type: GgmlTypeName
  /** Offset within the data blob. */
  offset: number
  size: number
}

export interface GgufFile {
  version: number
  alignment: number
  dataOffset: number
  metadata: Map<string, unknown>
  tensors: GgufTensorInfo[]
}

const TYPE_BY_CODE = new Map<number, string>(Object.entries(GGUF_VALUE_TYPE).map(([name, code]) => [code, name]))

export function readGguf (file: string): GgufFile {
  const fd = fs.openSync(file, 'r')
  try {
    const r = new ChunkReader(fd)
    const magic = new TextDecoder().decode(r.take(4))
    if (magic !== GGUF_MAGIC) throw new Error(`${file}: not a GGUF file (magic ${JSON.stringify(magic)})`)
    const version = r.u32()
    if (version !== 3) throw new Error(`${file}: GGUF version ${version} (this reader knows 3)`)
    const tensorCount = r.count()
    const kvCount = r.count()
    const metadata = new Map<string, unknown>()
    for (let i = 0; i < kvCount; i++) {
      const key = r.string()
      metadata.set(key, readValue(r, r.u32()))
    }
    const alignment = (metadata.get('general.alignment') as number | undefined) ?? GGUF_DEFAULT_ALIGNMENT
    const tensors: GgufTensorInfo[] = []
    for (let i = 0; i < tensorCount; i++) {
      const name = r.string()
      const nDims = r.u32()
      const dims = Array.from({ length: nDims }, () => r.count())
      const code = r.u32()
      const type = ggmlTypeName(code)
      if (!type) throw new Error(`${file}: tensor ${name} has ggml type ${code}, which this reader does not know`)
      tensors.push({ name, dims, type, offset: r.count(), size: tensorBytes(type, dims) })
    }
    return { version, alignment, dataOffset: alignUp(r.pos, alignment), metadata, tensors }
  } finally {
    fs.closeSync(fd)
  }
}

/** One tensor's raw bytes. */
export function readGgufTensor (file: string, gguf: GgufFile, name: string): { info: GgufTensorInfo; bytes: Uint8Array } {
  const info = gguf.tensors.find(t => t.name === name)
  if (!info) throw new Error(`${file}: no tensor ${name}`)
  const bytes = new Uint8Array(info.size)
  const fd = fs.openSync(file, 'r')
  try {
    for (let done = 0; done < bytes.length;) {
      const n = fs.readSync(fd, bytes, done, bytes.length - done, gguf.dataOffset + info.offset + done)
      if (n === 0) throw new Error(`${file}: tensor ${name} runs past the end of the file`)
      done += n
    }
  } finally {
    fs.closeSync(fd)
  }
  return { info, bytes }
}

/** A one-line summary of tensor types, e.g. "Q4_0 x 197, F32 x 141, Q6_K x 1". */
export function tensorTypeSummary (gguf: GgufFile): string {
  const counts = new Map<string, number>()
  for (const t of gguf.tensors) counts.set(t.type, (counts.get(t.type) ?? 0) + 1)
  return [...counts].sort((a, b) => b[1] - a[1]).map(([type, n]) => `${type} x ${n}`).join(', ')
}

function readValue (r: ChunkReader, code: number): unknown {
  const type = TYPE_BY_CODE.get(code)
  switch (type) {
    case 'u8': return r.view(1).getUint8(0)
    case 'i8': return r.view(1).getInt8(0)
    case 'u16': return r.view(2).getUint16(0, true)
    case 'i16': return r.view(2).getInt16(0, true)
    case 'u32': return r.u32()
    case 'i32': return r.view(4).getInt32(0, true)
    case 'f32': return r.view(4).getFloat32(0, true)
    case 'f64': return r.view(8).getFloat64(0, true)
    case 'u64': return r.view(8).getBigUint64(0, true)
    case 'i64': return r.view(8).getBigInt64(0, true)
    case 'bool': return r.view(1).getInt8(0) !== 0
    case 'string': return r.string()
    case 'array': {
      const of = r.u32()
      if (of === GGUF_VALUE_TYPE.array) throw new Error('GGUF arrays of arrays are not supported')
      const n = r.count()
      return Array.from({ length: n }, () => readValue(r, of))
    }
    default: throw new Error(`unknown GGUF value type ${code}`)
  }
}

/** Sequential little-endian reads from a file, fetching 1 MiB at a time. */
class ChunkReader {
  pos = 0
  #buf = new Uint8Array(0)
  #bufStart = 0
  readonly #fd: number

  constructor (fd: number) {
    this.#fd = fd
  }

  take (n: number): Uint8Array {
    if (this.pos + n > this.#bufStart + this.#buf.length) {
      const size = Math.max(n, 2 ** 20)
      const next = new Uint8Array(size)
      const got = fs.readSync(this.#fd, next, 0, size, this.pos)
      if (got < n) throw new Error(`GGUF header ends early at byte ${this.pos + got}`)
      this.#buf = next.subarray(0, got)
      this.#bufStart = this.pos
    }
    const start = this.pos - this.#bufStart
    this.pos += n
    return this.#buf.subarray(start, start + n)
  }

  view (n: number): DataView {
    const b = this.take(n)
    return new DataView(b.buffer, b.byteOffset, n)
  }

  u32 (): number { return this.view(4).getUint32(0, true) }

  /** A u64 count, dimension or offset, as a number (all of ours are far below 2^53). */
  count (): number {
    const v = this.view(8).getBigUint64(0, true)
    if (v > BigInt(Number.MAX_SAFE_INTEGER)) throw new Error(`GGUF value ${v} is too large`)
    return Number(v)
  }

  string (): string {
    return new TextDecoder().decode(this.take(this.count()))
  }
}
