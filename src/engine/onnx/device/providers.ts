// Which execution provider a session runs on, and why. Asked for by name
// (ONNX_DEVICE or a models.json entry's "device"), that provider or a clear
// error naming what the machine lacks; `auto` tries them in order:
//   1. CUDA, when onnxruntime-node's CUDA provider library is installed and loads;
//   2. WebGPU, when it reaches a real GPU (never a software renderer: webgpu.ts);
//   3. the CPU.
// The reason for the pick goes with the session, for the "model ready" line.
import os from 'node:os'
import { cudaProviderInstalled, cudaProviderPath, INSTALL_CUDA_COMMAND } from './cuda-provider.ts'
import { ort } from './ort.ts'
import { gpuDeviceNodes, probeGpuAdapter, webgpuUnavailableMessage } from './webgpu.ts'

export { cudaProviderInstalled }

/** What ONNX_DEVICE and a models.json entry's "device" may say. */
export const DEVICE_CHOICES = ['auto', 'cpu', 'cuda', 'webgpu'] as const
export type DeviceChoice = typeof DEVICE_CHOICES[number]
/** The execution provider a session actually runs on. */
export type Device = Exclude<DeviceChoice, 'auto'>

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
  /** Outputs that stay in GPU memory (gpu-buffer tensors) when the session runs on WebGPU. */
  deviceOutputs?: string[]
  /**
   * On WebGPU, deviceOutputs are given to each run as GPU buffers the caller holds (preallocated
   * outputs, which onnxruntime-node takes only when no preferredOutputLocation is set) rather than
   * made anew by every run.
   */
  deviceOutputsPreallocated?: boolean
}

export interface LoadedSession {
  session: ort.InferenceSession
  /** The execution provider the session actually runs on. */
  device: Device
  /** Why this one: asked for by name, or what `auto` found. */
  why: string
  /** The outputs that come back as GPU buffers (deviceOutputs, on WebGPU); none elsewhere. */
  outputsOnDevice: string[]
  /** outputsOnDevice are written into GPU buffers each run is given (deviceOutputsPreallocated), not made by the run. */
  outputsPreallocated: boolean
  /** WebGPU with no GPU device on this machine: a software Vulkan renderer (such as lavapipe) runs it. */
  softwareRenderer: boolean
}

/** A device asked for by name that this machine cannot give: the message names who asked (the setting or the models.json entry). */
export class DeviceError extends Error {}

const asked = (device: Device, from?: string): string => from === undefined ? `ONNX_DEVICE=${device}` : `${from} asks for "device": "${device}"`
const AUTO = 'CUDA when it loads, then a real GPU through WebGPU, else the CPU'
const otherDevices = (from?: string): string => from === undefined
  ? `Or set ONNX_DEVICE=auto (${AUTO}) or ONNX_DEVICE=cpu.`
  : `Or set that entry's "device" to "auto" (${AUTO}) or "cpu", or remove it to follow ONNX_DEVICE.`

/** CUDA asked for on a machine without the provider library: which file is missing where, and the command. */
export function cudaProviderMissingMessage (library = cudaProviderPath(), from?: string): string {
  return `${asked('cuda', from)} but onnxruntime-node's CUDA provider library is not installed: ${library} does not exist. ` +
    `Run ${INSTALL_CUDA_COMMAND} to download it; the CUDA 12 and cuDNN 9 runtime libraries and an NVIDIA driver are needed as well. ` +
    otherDevices(from)
}

/** CUDA asked for, the provider library installed, and onnxruntime still could not start it: its own message. */
export function cudaLoadFailedMessage (err: Error, library = cudaProviderPath(), from?: string): string {
  return `${asked('cuda', from)}: onnxruntime-node's CUDA provider library is installed (${library}) but the CUDA execution provider could not be loaded: ${err.message}. ` +
    'Usually the CUDA 12 runtime (cuBLAS included) or cuDNN 9 libraries are not on the library path (LD_LIBRARY_PATH), or there is no usable NVIDIA GPU or driver. ' +
    otherDevices(from)
}

/** WebGPU asked for and not available: onnxruntime's message and what this machine lacks (webgpu.ts). */
export function webgpuFailedMessage (err: Error, from?: string): string {
  return webgpuUnavailableMessage(err, asked('webgpu', from), otherDevices(from))
}

/** The first line of an error: onnxruntime's messages can carry a whole log. */
const firstLine = (err: unknown): string => String((err as Error).message ?? err).split('\n')[0]

export async function createSession (model: string | Uint8Array, settings: SessionSettings): Promise<LoadedSession> {
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
  const open = (device: Device): Promise<ort.InferenceSession> => {
    // An InferenceSession.create(path) and create(bytes) differ only in their first argument.
    const create = ort.InferenceSession.create as (m: string | Uint8Array, o: ort.InferenceSession.SessionOptions) => Promise<ort.InferenceSession>
    if (device !== 'webgpu') return create(model, { ...base, executionProviders: [device] })
    const onDevice = Object.fromEntries((settings.deviceOutputs ?? []).map(name => [name, 'gpu-buffer' as const]))
    const made = settings.deviceOutputs?.length && !settings.deviceOutputsPreallocated
    return create(model, { ...base, executionProviders: ['webgpu'], ...(made ? { preferredOutputLocation: onDevice } : {}) })
  }
  const from = settings.deviceFrom
  const onDevice = (device: Device): string[] => device === 'webgpu' ? settings.deviceOutputs ?? [] : []
  const loaded = async (device: Device, why: string, softwareRenderer = false): Promise<LoadedSession> => {
    const outputsOnDevice = onDevice(device)
    const outputsPreallocated = outputsOnDevice.length > 0 && settings.deviceOutputsPreallocated === true
    return { session: await open(device), device, why, outputsOnDevice, outputsPreallocated, softwareRenderer }
  }
  switch (settings.device) {
    case 'cpu':
      return loaded('cpu', `asked for (${asked('cpu', from)})`)
    case 'cuda':
      // Asked for by name: say which file is missing rather than relay onnxruntime's "Failed to load library".
      if (!cudaProviderInstalled()) throw new DeviceError(cudaProviderMissingMessage(undefined, from))
      try {
        return await loaded('cuda', `asked for (${asked('cuda', from)})`)
      } catch (err) {
        throw new DeviceError(cudaLoadFailedMessage(err as Error, undefined, from))
      }
    case 'webgpu':
      try {
        // Asked for by name, any adapter will do; say so when it can only be a software renderer.
        const software = process.platform === 'linux' && gpuDeviceNodes().length === 0
        return await loaded('webgpu', `asked for (${asked('webgpu', from)})${software ? '; there is no GPU device on this machine, so a software Vulkan renderer (such as lavapipe) runs it' : ''}`, software)
      } catch (err) {
        if (!/WebGPU adapter|WebGpuContext|Dawn|Vulkan/i.test((err as Error).message)) throw err
        throw new DeviceError(webgpuFailedMessage(err as Error, from))
      }
  }
  const passed: string[] = []
  // Without the CUDA provider's library beside the binding (a CPU install), trying CUDA only
  // makes onnxruntime print a red "Failed to load library" error on every start.
  if (cudaProviderInstalled()) {
    try {
      return await loaded('cuda', 'auto: the CUDA execution provider loaded')
    } catch (err) {
      passed.push(`CUDA could not be loaded (${firstLine(err)})`)
    }
  } else {
    passed.push('onnxruntime-node\'s CUDA provider is not installed')
  }
  const gpu = await probeGpuAdapter()
  if (gpu.gpu) {
    try {
      return await loaded('webgpu', `auto: ${passed.join('; ')}; ${gpu.reason}`)
    } catch (err) {
      passed.push(`WebGPU could not start (${firstLine(err)})`)
    }
  } else {
    passed.push(gpu.reason)
  }
  return loaded('cpu', `auto: ${passed.join('; ')}`)
}
