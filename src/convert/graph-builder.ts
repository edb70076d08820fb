// A small helper for writing ONNX graphs node by node: it names values,
// collects initializers (large ones go to an external data file, as ONNX
// requires for models over 2 GiB), and produces the ModelInit to encode.
import fs from 'node:fs'
import { AttributeType, DataType, type AttributeInit, type ModelInit, type NodeInit, type TensorInit, type ValueInfoInit } from './onnx-proto.ts'

/** Attribute constructors: ONNX attributes are typed, JS numbers are not. */
export const attr = {
  i: (value: number) => ({ type: AttributeType.INT, i: value }),
  f: (value: number) => ({ type: AttributeType.FLOAT, f: value }),
  ints: (values: number[]) => ({ type: AttributeType.INTS, ints: values }),
  s: (value: string) => ({ type: AttributeType.STRING, s: Buffer.from(value, 'utf8') }),
}
type Attr = ReturnType<typeof attr[keyof typeof attr]>

/** Tensors at least this big are stored in the external data file. */
const EXTERNAL_THRESHOLD_BYTES = 1024
/** Page alignment lets onnxruntime map external data instead of copying it. */
const EXTERNAL_ALIGNMENT = 4096

/** Appends tensor bytes to `<model>.onnx_data`, page-aligned. */
export class ExternalDataWriter {
  readonly fileName: string
  readonly #fd: number
  #offset = 0

  constructor (filePath: string, fileName: string) {
    this.fileName = fileName
    this.#fd = fs.openSync(filePath, 'w')
  }

  append (bytes: Uint8Array): { offset: number; length: number } {
    const padding = (EXTERNAL_ALIGNMENT - (this.#offset % EXTERNAL_ALIGNMENT)) % EXTERNAL_ALIGNMENT
    if (padding > 0) {
      fs.writeSync(this.#fd, new Uint8Array(padding))
      this.#offset += padding
    }
    const offset = this.#offset
    let written = 0
    while (written < bytes.byteLength) {
      written += fs.writeSync(this.#fd, bytes, written, bytes.byteLength - written)
    }
    this.#offset += bytes.byteLength
    return { offset, length: bytes.byteLength }
  }

  close (): void {
    fs.fsyncSync(this.#fd)
    fs.closeSync(this.#fd)
  }
}

export type Dim = number | string

export class GraphBuilder {
  readonly #nodes: NodeInit[] = []
  readonly #initializers: TensorInit[] = []
  readonly #inputs: ValueInfoInit[] = []
  readonly #outputs: ValueInfoInit[] = []
  readonly #external: ExternalDataWriter | null
  #counter = 0
  readonly #constants = new Map<string, string>()

  constructor (external: ExternalDataWriter | null) {
    this.#external = external
  }

  input (name: string, elemType: number, dims: Dim[]): string {
    this.#inputs.push(valueInfo(name, elemType, dims))
    return name
  }

  output (name: string, elemType: number, dims: Dim[]): void {
    this.#outputs.push(valueInfo(name, elemType, dims))
  }

  /** Adds a node and returns its output names (one unless `outputs` asks for more). */
  node (opType: string, inputs: string[], attrs: Record<string, Attr> = {},
    opts: { domain?: string; outputs?: number | string[]; name?: string } = {}): string[] {
    const id = this.#counter++
    const name = opts.name ?? `${opType}_${id}`
    const outputs = Array.isArray(opts.outputs)
      ? opts.outputs
      : Array.from({ length: opts.outputs ?? 1 }, (_, k) => `${name}/out${k}`)
    const attribute: AttributeInit[] = Object.entries(attrs).map(([key, a]) => ({ name: key, ...a }))
    this.#nodes.push({ op_type: opType, domain: opts.domain ?? '', name, input: inputs, output: outputs, attribute })
    return outputs
  }

  /** Single-output shorthand for node(). */
  op (opType: string, inputs: string[], attrs: Record<string, Attr> = {}, opts: { domain?: string; name?: string; output?: string } = {}): string {
    return this.node(opType, inputs, attrs, { domain: opts.domain, name: opts.name, outputs: opts.output ? [opts.output] : 1 })[0]
  }

  initializer (name: string, dataType: number, dims: number[], bytes: Uint8Array): string {
    const tensor: TensorInit = { name, dims, data_type: dataType }
    if (this.#external && bytes.byteLength >= EXTERNAL_THRESHOLD_BYTES) {
      const { offset, length } = this.#external.append(bytes)
      tensor.data_location = 1
      tensor.external_data = [
        { key: 'location', value: this.#external.fileName },
        { key: 'offset', value: String(offset) },
        { key: 'length', value: String(length) },
      ]
    } else {
      tensor.raw_data = bytes
    }
    this.#initializers.push(tensor)
    return name
  }

  /** A deduplicated int64 constant (shapes, axes, indices). */
  int64 (values: number[], scalar = false): string {
    const key = `i64:${scalar ? 's' : 'v'}:${values.join(',')}`
    let name = this.#constants.get(key)
    if (!name) {
      name = `const_i64_${this.#constants.size}`
      const data = new BigInt64Array(values.map(v => BigInt(v)))
      this.initializer(name, DataType.INT64, scalar ? [] : [values.length], new Uint8Array(data.buffer))
      this.#constants.set(key, name)
    }
    return name
  }

  /** A deduplicated float32 constant. */
  float (values: number[], scalar = false): string {
    const key = `f32:${scalar ? 's' : 'v'}:${values.join(',')}`
    let name = this.#constants.get(key)
    if (!name) {
      name = `const_f32_${this.#constants.size}`
      const data = new Float32Array(values)
      this.initializer(name, DataType.FLOAT, scalar ? [] : [values.length], new Uint8Array(data.buffer))
      this.#constants.set(key, name)
    }
    return name
  }

  build (opsets: Array<{ domain: string; version: number }>, metadata: Record<string, string>): ModelInit {
    return {
      ir_version: 8,
      producer_name: 'chatd',
      producer_version: '1',
      opset_import: opsets,
      graph: { name: 'decoder', node: this.#nodes, initializer: this.#initializers, input: this.#inputs, output: this.#outputs },
      metadata_props: Object.entries(metadata).map(([key, value]) => ({ key, value })),
    }
  }
}

function valueInfo (name: string, elemType: number, dims: Dim[]): ValueInfoInit {
  return {
    name,
    type: {
      tensor_type: {
        elem_type: elemType,
        shape: { dim: dims.map(d => typeof d === 'number' ? { dim_value: d } : { dim_param: d }) },
      },
    },
  }
}
