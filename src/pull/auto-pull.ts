// `chatd serve` fetching the missing files of a configured local model by
// itself (CHATD_AUTO_PULL, on by default), so that the start command works on
// a fresh machine. The registry builds a PullingBackend for such a model; the
// server starts answering at once and the model loads when its files are in.

import type { Config } from '../config.ts'
import type { Backend } from '../engine/backend.ts'
import { ModelDirError, readModelDir, type ModelDtype } from '../engine/onnx/model-dir.ts'
import type { OnnxModelEntry } from '../engine/registry.ts'
import { pullCheckpoint } from './checkpoint.ts'
import { pullModel } from './pull.ts'
import { PullingBackend } from './pulling-backend.ts'
import { hubLocation, pullCommand } from './model-source.ts'

/** True when the model directory lacks a file the engine needs (not when one is broken: that is a load error to report). */
export function modelFilesMissing (dir: string, dtype = 'q4'): boolean {
  try {
    readModelDir(dir, dtype as ModelDtype)
    return false
  } catch (err) {
    return err instanceof ModelDirError && /missing|not found/.test(err.message)
  }
}

export function createPullingBackend (
  entry: OnnxModelEntry & { hubRepo?: string },
  dir: string,
  config: Partial<Pick<Config, 'hfEndpoint' | 'hfToken'>>,
  open: () => Promise<Backend>
): PullingBackend {
  const hub = hubLocation({ ...entry, hubRepo: entry.hubRepo! }, config)
  return new PullingBackend({
    id: entry.id,
    source: `${hub.endpoint}/${hub.repo}`,
    pullCommand: pullCommand(entry.id),
    pull: async (onEvent, signal) => {
      const pull = { hub, dir, dtype: (entry.dtype ?? 'q4') as ModelDtype, onEvent, signal }
      await (entry.source === 'checkpoint' ? pullCheckpoint(pull) : pullModel(pull))
    },
    open,
  })
}
