// Which form a checkpoint is converted into (convert/model-forms.ts): the one
// for the device the model will run on, as ONNX_DEVICE or its models.json
// "device" names it. `auto` is answered as the engine will answer it
// (engine/onnx/device/providers.ts): CUDA first, which runs the CPU form's
// graph; then a real GPU through WebGPU; else the CPU.
import type { ModelForm } from '../convert/model-forms.ts'
import { entryDevice, type OnnxModelEntry } from '../engine/models-file.ts'
import { cudaProviderInstalled, type DeviceChoice } from '../engine/onnx/device/providers.ts'
import { probeGpuAdapter } from '../engine/onnx/device/webgpu.ts'

export interface DeviceForm {
  form: ModelForm
  /** Why, for the pull's first line: "ONNX_DEVICE=webgpu". */
  why: string
}

/** `deviceFrom`: who asked, as the engine's errors say it ('models.json entry "m"'); absent: ONNX_DEVICE. */
export async function formForDevice (device: DeviceChoice, deviceFrom?: string): Promise<DeviceForm> {
  const asked = deviceFrom === undefined ? `ONNX_DEVICE=${device}` : `${deviceFrom}'s "device": "${device}"`
  switch (device) {
    case 'webgpu': return { form: 'gpu', why: asked }
    case 'cpu': return { form: 'cpu', why: asked }
    // The GPU form is written for WebGPU; CUDA runs the graph it always has.
    case 'cuda': return { form: 'cpu', why: asked }
  }
  if (cudaProviderInstalled()) return { form: 'cpu', why: `${asked}, and onnxruntime's CUDA provider is installed` }
  const gpu = await probeGpuAdapter()
  return gpu.gpu ? { form: 'gpu', why: `${asked}: ${gpu.reason}` } : { form: 'cpu', why: `${asked}: ${gpu.reason}` }
}

/** The form for a local model: for its entry's "device", else ONNX_DEVICE (`onnxDevice`). */
export function formForEntry (entry: OnnxModelEntry, onnxDevice: DeviceChoice): Promise<DeviceForm> {
  const { device, deviceFrom } = entryDevice(entry, onnxDevice)
  return formForDevice(device, deviceFrom)
}
