// GPU buffers for a cache kept in place (DecoderSession.cacheInPlace). JavaScript
// cannot make or write a GPU buffer through onnxruntime-node; a session's output
// with preferredOutputLocation 'gpu-buffer' is one, on onnxruntime's one WebGPU
// device per process, which the decoder's session shares. So a one-node session
// (Pad) makes them: a cache's positions, on the host (an upload) or in GPU memory
// (a bigger buffer), followed by zeros up to the room asked for.
import { ort, type OrtTensor } from './ort.ts'

// padded = Pad(source, pads), constant zeros; source and padded float [rows, heads, held or room,
// dim], pads int64[8]. Kept as bytes as chatd's graph writer writes them (the runtime never imports
// the converter; test/engine/onnx/device/webgpu.test.ts rebuilds it and compares).
export const PAD_MODEL = Buffer.from('CAgSBWNoYXRkGgExOrwBCjkKBnNvdXJjZQoEcGFkcxIGcGFkZGVkGgVQYWRfMCIDUGFkKhMKBG1vZGUiCGNvbnN0YW50oAEDOgASB2RlY29kZXJaMAoGc291cmNlEiYKJAgBEiAKBhIEcm93cwoHEgVoZWFkcwoGEgRoZWxkCgUSA2RpbVoSCgRwYWRzEgoKCAgHEgQKAggIYjAKBnBhZGRlZBImCiQIARIgCgYSBHJvd3MKBxIFaGVhZHMKBhIEcm9vbQoFEgNkaW1CBAoAEBE=', 'base64')

export class GpuBuffers {
  readonly #session: ort.InferenceSession

  private constructor (session: ort.InferenceSession) {
    this.#session = session
  }

  static async open (): Promise<GpuBuffers> {
    // Warnings only, as the decoder's sessions (providers.ts).
    return new GpuBuffers(await ort.InferenceSession.create(PAD_MODEL, { executionProviders: ['webgpu'], preferredOutputLocation: 'gpu-buffer', logSeverityLevel: 3 }))
  }

  /**
   * A float32 GPU buffer [rows, heads, room, dim]: `source`'s positions (on the host or the
   * GPU, [rows, heads, held, dim], held <= room) first in each row, zeros after.
   */
  async padded (source: OrtTensor, room: number): Promise<OrtTensor> {
    const held = source.dims[2]
    if (room < held) throw new Error(`a cache buffer of ${room} positions cannot take ${held}`)
    const pads = new ort.Tensor('int64', BigInt64Array.from([0, 0, 0, 0, 0, 0, room - held, 0], BigInt), [8])
    return (await this.#session.run({ source, pads })).padded
  }

  async close (): Promise<void> {
    await this.#session.release()
  }
}
