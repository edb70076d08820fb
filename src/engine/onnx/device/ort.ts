// onnxruntime-node, loaded once per thread with the settings chatd relies on.
import os from 'node:os'
import ort from 'onnxruntime-node'
import { cudaProviderInstalled, cudaProviderPath, INSTALL_CUDA_COMMAND } from './cuda-provider.ts'

export { cudaProviderInstalled }

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

export type DeviceChoice = 'auto' | 'cpu' | 'cuda'

export interface SessionSettings {
  device: DeviceChoice
  /** Who asked for the device, for its errors: a models.json entry ('models.json entry "m"'); absent: ONNX_DEVICE. */
  deviceFrom?: string
  /** Intra-op threads; 0 lets chatd pick the machine's parallelism. */
  threads: number
  /**
   * Where onnxruntime writes its per-node timing trace (Chrome trace JSON,
   * `<prefix>_<date>.json`); unset in a server. For profiling only: every
   * node of every step is recorded.
   */
  profilePrefix?: string
}

export interface LoadedSession {
  session: ort.InferenceSession
  /** The execution provider the session actually runs on. */
  device: 'cpu' | 'cuda'
}

/** A device asked for by name that this machine cannot give: the message names who asked (the setting or the models.json entry). */
export class DeviceError extends Error {}

const askedCuda = (from?: string): string => from === undefined ? 'ONNX_DEVICE=cuda' : `${from} asks for "device": "cuda"`
const otherDevices = (from?: string): string => from === undefined
  ? 'Or set ONNX_DEVICE=auto (CUDA when it loads, else the CPU) or ONNX_DEVICE=cpu.'
  : 'Or set that entry\'s "device" to "auto" (CUDA when it loads, else the CPU) or "cpu", or remove it to follow ONNX_DEVICE.'

/** CUDA asked for on a machine without the provider library: which file is missing where, and the command. */
export function cudaProviderMissingMessage (library = cudaProviderPath(), from?: string): string {
  return `${askedCuda(from)} but onnxruntime-node's CUDA provider library is not installed: ${library} does not exist. ` +
    `Run ${INSTALL_CUDA_COMMAND} to download it; the CUDA 12 and cuDNN 9 runtime libraries and an NVIDIA driver are needed as well. ` +
    otherDevices(from)
}

/** CUDA asked for, the provider library installed, and onnxruntime still could not start it: its own message. */
export function cudaLoadFailedMessage (err: Error, library = cudaProviderPath(), from?: string): string {
  return `${askedCuda(from)}: onnxruntime-node's CUDA provider library is installed (${library}) but the CUDA execution provider could not be loaded: ${err.message}. ` +
    'Usually the CUDA 12 runtime (cuBLAS included) or cuDNN 9 libraries are not on the library path (LD_LIBRARY_PATH), or there is no usable NVIDIA GPU or driver. ' +
    otherDevices(from)
}

export async function createSession (modelPath: string, settings: SessionSettings): Promise<LoadedSession> {
  const base: ort.InferenceSession.SessionOptions = {
    graphOptimizationLevel: 'all',
    executionMode: 'sequential',
    intraOpNumThreads: settings.threads > 0 ? settings.threads : os.availableParallelism(),
    interOpNumThreads: 1,
    enableCpuMemArena: true,
    enableMemPattern: true,
    // Warnings only: onnxruntime's info logs are noise in a server's output.
    logSeverityLevel: 3,
    ...(settings.profilePrefix ? { enableProfiling: true, profileFilePrefix: settings.profilePrefix } : {}),
  }
  // Without the CUDA provider's library beside the binding (a CPU install),
  // `auto` goes straight to CPU: trying CUDA there only makes onnxruntime
  // print a red "Failed to load library" error on every start.
  if (settings.device === 'cpu' || (settings.device === 'auto' && !cudaProviderInstalled())) {
    return { session: await ort.InferenceSession.create(modelPath, { ...base, executionProviders: ['cpu'] }), device: 'cpu' }
  }
  // Asked for by name: say which file is missing rather than relay onnxruntime's "Failed to load library".
  if (settings.device === 'cuda' && !cudaProviderInstalled()) throw new DeviceError(cudaProviderMissingMessage(undefined, settings.deviceFrom))
  try {
    const session = await ort.InferenceSession.create(modelPath, { ...base, executionProviders: ['cuda'] })
    return { session, device: 'cuda' }
  } catch (err) {
    if (settings.device === 'cuda') throw new DeviceError(cudaLoadFailedMessage(err as Error, undefined, settings.deviceFrom))
    return { session: await ort.InferenceSession.create(modelPath, { ...base, executionProviders: ['cpu'] }), device: 'cpu' }
  }
}

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
