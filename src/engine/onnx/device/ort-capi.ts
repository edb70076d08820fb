// onnxruntime's C API, called through koffi (an FFI), for the two things
// onnxruntime-node's binding does not reach: the WebGPU provider's graph capture
// (`enableGraphCapture`, which the provider reads when it is appended, and which the
// binding's fixed list of WebGPU options leaves out) and a run's inputs and outputs
// bound once to fixed GPU tensors (IoBinding). It loads the same libonnxruntime.so.1
// as onnxruntime-node, so a process has one onnxruntime and one WebGPU device.
// Used by captured-step.ts; nothing else in chatd calls onnxruntime this way. A wrong
// argument here is a crash, not an error: every call goes through the typed methods below.
import { createRequire } from 'node:module'
import path from 'node:path'
import koffi from 'koffi'

/**
 * Where each function this file calls sits in `struct OrtApi` (onnxruntime_c_api.h). The
 * struct only grows at its end, so an index holds for every API version since its function came.
 */
const API_INDEX = {
  GetErrorMessage: 2,
  CreateEnv: 3,
  CreateSession: 7,
  CreateSessionFromArray: 8,
  CreateSessionOptions: 10,
  SetSessionLogSeverityLevel: 22,
  SetSessionGraphOptimizationLevel: 23,
  CreateTensorAsOrtValue: 48,
  CreateTensorWithDataAsOrtValue: 49,
  CreateMemoryInfo: 68,
  CreateCpuMemoryInfo: 69,
  ReleaseEnv: 92,
  ReleaseStatus: 93,
  ReleaseMemoryInfo: 94,
  ReleaseSession: 95,
  ReleaseValue: 96,
  ReleaseSessionOptions: 100,
  AddFreeDimensionOverrideByName: 124,
  CreateIoBinding: 134,
  ReleaseIoBinding: 135,
  BindInput: 136,
  BindOutput: 137,
  RunWithBinding: 133,
  CreateAllocator: 131,
  ReleaseAllocator: 132,
  SessionOptionsAppendExecutionProvider: 216,
} as const

/** onnxruntime's API version this was written against (onnxruntime 1.30). */
const API_VERSION = 30

export const ElementType = { float: 1, int64: 7 } as const
export type ElementName = keyof typeof ElementType
const ELEMENT_BYTES: Record<ElementName, number> = { float: 4, int64: 8 }

type Ptr = bigint
/** A run of a session on inputs and outputs bound once (Session.bind). */
export type BoundRun = () => void
type ApiName = keyof typeof API_INDEX
type ApiFunctions = Record<ApiName, (...args: unknown[]) => unknown>

/** The path of the libonnxruntime.so.1 that onnxruntime-node loads. */
function libraryPath (): string {
  const require = createRequire(import.meta.url)
  const root = path.dirname(require.resolve('onnxruntime-node/package.json'))
  return path.join(root, 'bin', 'napi-v6', process.platform, process.arch, 'libonnxruntime.so.1')
}

/** A tensor in memory onnxruntime holds: on the host (`view` reads and writes it) or a device's. */
export interface Value {
  readonly handle: Ptr
  readonly type: ElementName
  readonly dims: number[]
  /** Host tensors: their memory. */
  readonly view?: ArrayBuffer
  /** Host tensors made by hostTensor: the address of their memory. */
  readonly memory?: Ptr
}

/** onnxruntime's C API functions this file calls, read once a process (koffi's type names are global). */
let loaded: ApiFunctions | null = null
function apiFunctions (): ApiFunctions {
  if (loaded) return loaded
  const lib = koffi.load(libraryPath())
  const base = koffi.decode(lib.func('void *OrtGetApiBase()')() as Ptr, koffi.struct({ GetApi: 'void *', GetVersionString: 'void *' })) as { GetApi: Ptr }
  const api = koffi.call(base.GetApi, koffi.proto('void *GetApi(uint32_t version)'), API_VERSION) as Ptr | null
  if (!api) throw new Error(`this libonnxruntime does not offer API version ${API_VERSION}`)
  const table = koffi.decode(api, 'void *', Math.max(...Object.values(API_INDEX)) + 1) as Ptr[]
  const protos: Record<ApiName, string> = {
    GetErrorMessage: 'const char *f(void *status)',
    CreateEnv: 'void *f(int level, const char *id, _Out_ void **out)',
    CreateSession: 'void *f(void *env, const char *path, void *options, _Out_ void **out)',
    CreateSessionFromArray: 'void *f(void *env, const void *data, size_t bytes, void *options, _Out_ void **out)',
    CreateSessionOptions: 'void *f(_Out_ void **out)',
    SetSessionLogSeverityLevel: 'void *f(void *options, int level)',
    SetSessionGraphOptimizationLevel: 'void *f(void *options, int level)',
    CreateTensorAsOrtValue: 'void *f(void *allocator, const int64_t *shape, size_t rank, int type, _Out_ void **out)',
    CreateTensorWithDataAsOrtValue: 'void *f(void *info, void *data, size_t bytes, const int64_t *shape, size_t rank, int type, _Out_ void **out)',
    CreateMemoryInfo: 'void *f(const char *name, int allocator, int device, int memType, _Out_ void **out)',
    CreateCpuMemoryInfo: 'void *f(int allocator, int memType, _Out_ void **out)',
    ReleaseEnv: 'void f(void *p)',
    ReleaseStatus: 'void f(void *p)',
    ReleaseMemoryInfo: 'void f(void *p)',
    ReleaseSession: 'void f(void *p)',
    ReleaseValue: 'void f(void *p)',
    ReleaseSessionOptions: 'void f(void *p)',
    AddFreeDimensionOverrideByName: 'void *f(void *options, const char *name, int64_t value)',
    CreateIoBinding: 'void *f(void *session, _Out_ void **out)',
    ReleaseIoBinding: 'void f(void *p)',
    BindInput: 'void *f(void *binding, const char *name, void *value)',
    BindOutput: 'void *f(void *binding, const char *name, void *value)',
    RunWithBinding: 'void *f(void *session, void *runOptions, void *binding)',
    CreateAllocator: 'void *f(void *session, void *info, _Out_ void **out)',
    ReleaseAllocator: 'void f(void *p)',
    SessionOptionsAppendExecutionProvider: 'void *f(void *options, const char *name, const char **keys, const char **values, size_t count)',
  }
  const fns = Object.fromEntries(Object.entries(protos).map(([name, proto]) => {
    const at = table[API_INDEX[name as ApiName]]
    return [name, koffi.decode(at, koffi.proto(proto.replace(/\bf\(/, `${name}(`)))]
  })) as ApiFunctions
  loaded = fns
  return fns
}

export class OrtCApi {
  readonly #fn: ApiFunctions
  readonly #env: Ptr
  readonly #released: Array<() => void> = []
  /** Host tensors not yet released, each by its handle: what releases it (freeHost, or close). */
  readonly #hostReleases = new Map<Ptr, () => void>()

  constructor (logLevel: 0 | 1 | 2 | 3 = 2) {
    this.#fn = apiFunctions()
    this.#env = this.#out('CreateEnv', logLevel, 'chatd')
  }

  /** Calls `name`, throwing onnxruntime's message if it returns a status. */
  #call (name: ApiName, ...args: unknown[]): void {
    const status = this.#fn[name](...args) as Ptr | null
    if (status) {
      const message = this.#fn.GetErrorMessage(status) as string
      this.#fn.ReleaseStatus(status)
      throw new Error(`onnxruntime ${name}: ${message}`)
    }
  }

  /** Calls `name` with an output pointer last, and returns it. */
  #out (name: ApiName, ...args: unknown[]): Ptr {
    const out: [Ptr | null] = [null]
    this.#call(name, ...args, out)
    if (out[0] === null) throw new Error(`onnxruntime ${name} gave nothing back`)
    return out[0]
  }

  /**
   * A session on `model` (a file, or a graph's bytes): on the WebGPU provider with `providerOptions` (e.g. enableGraphCapture),
   * its free dimensions fixed as `dims` says, every optimization on.
   */
  session (model: string | Uint8Array, opts: { webgpu?: Record<string, string>; dims?: Record<string, number>; logLevel?: 0 | 1 | 2 | 3 } = {}): Session {
    const options = this.#out('CreateSessionOptions')
    try {
      this.#call('SetSessionGraphOptimizationLevel', options, 99)
      if (opts.logLevel !== undefined) this.#call('SetSessionLogSeverityLevel', options, opts.logLevel)
      for (const [name, value] of Object.entries(opts.dims ?? {})) this.#call('AddFreeDimensionOverrideByName', options, name, value)
      if (opts.webgpu) {
        const keys = Object.keys(opts.webgpu)
        this.#call('SessionOptionsAppendExecutionProvider', options, 'WebGPU', keys, keys.map(k => opts.webgpu?.[k] ?? ''), keys.length)
      }
      const handle = typeof model === 'string'
        ? this.#out('CreateSession', this.#env, model, options)
        : this.#out('CreateSessionFromArray', this.#env, model, model.byteLength, options)
      const session = new Session(this, handle)
      this.#released.push(() => session.release())
      return session
    } finally {
      this.#fn.ReleaseSessionOptions(options)
    }
  }

  /** @internal for Session */
  call (name: ApiName, ...args: unknown[]): void { this.#call(name, ...args) }
  /** @internal for Session */
  out (name: ApiName, ...args: unknown[]): Ptr { return this.#out(name, ...args) }
  /** @internal for Session */
  release (name: ApiName, handle: Ptr): void { this.#fn[name](handle) }

  /** A host tensor of zeros in memory of its own that does not move (onnxruntime keeps its address). */
  hostTensor (type: ElementName, dims: number[]): Value {
    const bytes = Math.max(1, dims.reduce((a, b) => a * b, 1)) * ELEMENT_BYTES[type]
    const memory = koffi.alloc('uint8_t', bytes) as Ptr
    const info = this.#out('CreateCpuMemoryInfo', 0, 0)
    try {
      const handle = this.#out('CreateTensorWithDataAsOrtValue', info, memory, bytes, BigInt64Array.from(dims, BigInt), dims.length, ElementType[type])
      const release = (): void => {
        if (!this.#hostReleases.delete(handle)) return
        this.#fn.ReleaseValue(handle)
        koffi.free(memory)
      }
      this.#hostReleases.set(handle, release)
      this.#released.push(release)
      const view = koffi.view(memory, bytes)
      new Uint8Array(view).fill(0)
      return { handle, type, dims, view, memory }
    } finally {
      this.#fn.ReleaseMemoryInfo(info)
    }
  }

  /**
   * A host tensor of `dims` over the start of `of`'s memory (a tensor hostTensor made, at least as
   * large), for runs that take fewer elements than it holds; `release` it before `of` goes.
   */
  hostView (of: Value, dims: number[]): { value: Value; release: () => void } {
    const bytes = dims.reduce((a, b) => a * b, 1) * ELEMENT_BYTES[of.type]
    if (of.memory === undefined || of.view === undefined || bytes > of.view.byteLength) throw new Error(`a view of [${dims.join(', ')}] needs a host tensor of ${bytes} bytes at least`)
    const info = this.#out('CreateCpuMemoryInfo', 0, 0)
    try {
      const handle = this.#out('CreateTensorWithDataAsOrtValue', info, of.memory, bytes, BigInt64Array.from(dims, BigInt), dims.length, ElementType[of.type])
      let released = false
      return {
        value: { handle, type: of.type, dims },
        release: () => {
          if (!released) this.#fn.ReleaseValue(handle)
          released = true
        },
      }
    } finally {
      this.#fn.ReleaseMemoryInfo(info)
    }
  }

  /** Releases a tensor hostTensor made, and its memory, before close(): neither it nor its views may be used again. */
  freeHost (value: Value): void {
    this.#hostReleases.get(value.handle)?.()
  }

  /** Releases every session and tensor made here, then the environment. */
  close (): void {
    for (const release of this.#released.reverse()) release()
    this.#released.length = 0
    this.#fn.ReleaseEnv(this.#env)
  }

  /** @internal for Session */
  track (release: () => void): void { this.#released.push(release) }
}

/** A session, and the runs it makes on inputs and outputs bound once. */
export class Session {
  readonly #api: OrtCApi
  readonly #handle: Ptr
  /** The allocator of this session's GPU memory, made on the first gpuTensor(). */
  #allocator: Ptr | null = null
  #released = false

  constructor (api: OrtCApi, handle: Ptr) {
    this.#api = api
    this.#handle = handle
  }

  /** A tensor in the GPU memory of this session's WebGPU provider (uninitialized). */
  gpuTensor (type: ElementName, dims: number[]): Value {
    if (this.#allocator === null) {
      const info = this.#api.out('CreateMemoryInfo', 'WebGPU_Buffer', 0, 0, 0)
      try {
        const allocator = this.#api.out('CreateAllocator', this.#handle, info)
        this.#allocator = allocator
        // Released after every tensor made with it (releases run in reverse order).
        this.#api.track(() => this.#api.release('ReleaseAllocator', allocator))
      } finally {
        this.#api.release('ReleaseMemoryInfo', info)
      }
    }
    const handle = this.#api.out('CreateTensorAsOrtValue', this.#allocator, BigInt64Array.from(dims, BigInt), dims.length, ElementType[type])
    this.#api.track(() => this.#api.release('ReleaseValue', handle))
    return { handle, type, dims }
  }

  /**
   * One run on these inputs and outputs. Host inputs to a GPU node are copied when they are bound,
   * so inputs whose contents change between runs are bound for each run, here.
   */
  run (inputs: Record<string, Value>, outputs: Record<string, Value>): void {
    const binding = this.#api.out('CreateIoBinding', this.#handle)
    try {
      this.#bindAll(binding, inputs, outputs)
      this.#api.call('RunWithBinding', this.#handle, null, binding)
    } finally {
      this.#api.release('ReleaseIoBinding', binding)
    }
  }

  /**
   * Inputs and outputs bound by name once; the function returned runs the session on them. For
   * inputs in GPU memory (or host inputs of nodes that run on the host): see run().
   */
  bind (inputs: Record<string, Value>, outputs: Record<string, Value>): BoundRun {
    const binding = this.#api.out('CreateIoBinding', this.#handle)
    this.#api.track(() => this.#api.release('ReleaseIoBinding', binding))
    this.#bindAll(binding, inputs, outputs)
    return () => this.#api.call('RunWithBinding', this.#handle, null, binding)
  }

  #bindAll (binding: Ptr, inputs: Record<string, Value>, outputs: Record<string, Value>): void {
    for (const [name, value] of Object.entries(inputs)) this.#api.call('BindInput', binding, name, value.handle)
    for (const [name, value] of Object.entries(outputs)) this.#api.call('BindOutput', binding, name, value.handle)
  }

  release (): void {
    if (this.#released) return
    this.#released = true
    this.#api.release('ReleaseSession', this.#handle)
  }
}
