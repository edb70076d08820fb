// Reads tensors from a Hugging Face .safetensors file (an 8-byte little-endian
// header length, a JSON header, then raw little-endian tensor bytes), one
// tensor at a time so multi-gigabyte checkpoints never sit in memory whole.
import fs from 'node:fs'
import type { Tensor } from './tensors.ts'

interface HeaderEntry {
  dtype: string
  shape: number[]
  data_offsets: [number, number]
}

export class SafetensorsFile {
  readonly path: string
  readonly #fd: number
  readonly #dataStart: number
  readonly #entries: Map<string, HeaderEntry>

  constructor (path: string) {
    this.path = path
    this.#fd = fs.openSync(path, 'r')
    const size = fs.fstatSync(this.#fd).size
    const lengthBytes = Buffer.alloc(8)
    fs.readSync(this.#fd, lengthBytes, 0, 8, 0)
    const headerLength = Number(lengthBytes.readBigUInt64LE(0))
    if (size < 8 || headerLength <= 0 || 8 + headerLength > size) {
      throw new Error(`${path}: not a safetensors file (header length ${headerLength} does not fit a ${size}-byte file)`)
    }
    const headerBytes = Buffer.alloc(headerLength)
    fs.readSync(this.#fd, headerBytes, 0, headerLength, 8)
    let header: Record<string, HeaderEntry | Record<string, string>>
    try {
      header = JSON.parse(headerBytes.toString('utf8'))
    } catch (err) {
      throw new Error(`${path}: safetensors header is not valid JSON (${(err as Error).message})`)
    }
    this.#dataStart = 8 + headerLength
    this.#entries = new Map()
    for (const [name, entry] of Object.entries(header)) {
      if (name === '__metadata__') continue
      this.#entries.set(name, entry as HeaderEntry)
    }
  }

  names (): string[] {
    return [...this.#entries.keys()]
  }

  has (name: string): boolean {
    return this.#entries.has(name)
  }

  shape (name: string): number[] {
    return this.#entry(name).shape
  }

  /** Reads one tensor and widens it to float32. */
  read (name: string): Tensor {
    const entry = this.#entry(name)
    const [begin, end] = entry.data_offsets
    const bytes = Buffer.alloc(end - begin)
    fs.readSync(this.#fd, bytes, 0, bytes.length, this.#dataStart + begin)
    const count = entry.shape.reduce((a, b) => a * b, 1)
    if (bytes.length !== count * bytesPer(entry.dtype)) {
      throw new Error(`${this.path}: tensor ${name} has ${bytes.length} bytes but shape [${entry.shape}] needs ${count * bytesPer(entry.dtype)}`)
    }
    const data = new Float32Array(count)
    switch (entry.dtype) {
      case 'F32':
        for (let i = 0; i < count; i++) data[i] = bytes.readFloatLE(i * 4)
        break
      case 'F16': {
        const half = new Float16Array(bytes.buffer, bytes.byteOffset, count)
        data.set(half)
        break
      }
      case 'BF16': {
        // bfloat16 is the top half of a float32.
        const bits = new Uint32Array(data.buffer)
        for (let i = 0; i < count; i++) bits[i] = bytes.readUInt16LE(i * 2) << 16
        break
      }
      default:
        throw new Error(`${this.path}: tensor ${name} has dtype ${entry.dtype}; only F32, F16 and BF16 are supported`)
    }
    return { shape: entry.shape, data }
  }

  close (): void {
    fs.closeSync(this.#fd)
  }

  #entry (name: string): HeaderEntry {
    const entry = this.#entries.get(name)
    if (!entry) throw new Error(`${this.path}: tensor ${name} not found`)
    return entry
  }
}

function bytesPer (dtype: string): number {
  return dtype === 'F32' ? 4 : 2
}
