// `chatd serve` fetching the missing files of a configured local model by
// itself (CHATD_AUTO_PULL, on by default), so that the start command works on
// a fresh machine. The server wraps the registry's onnx factory with
// withAutoPull: a model whose files are missing becomes a PullingBackend; the
// server starts answering at once and the model loads when its files are in.

import type { Config } from '../config.ts'
import type { Backend } from '../engine/backend.ts'
import { modelPath, type OnnxModelEntry } from '../engine/models-file.ts'
import { DEFAULT_DTYPE, ModelDirError, readModelDir, type ModelDtype } from '../engine/onnx/model-dir.ts'
import type { BackendFactory } from '../engine/registry.ts'
import { pullCheckpoint } from './checkpoint.ts'
import { formForEntry } from './device-form.ts'
import { pullModel } from './pull.ts'
import { PullingBackend } from './pulling-backend.ts'
import { hubLocation, pullCommand } from './model-source.ts'

/** True when the model directory lacks a file the engine needs (not when one is broken: that is a load error to report). */
export function modelFilesMissing (dir: string, dtype: string = DEFAULT_DTYPE): boolean {
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
  config: Partial<Pick<Config, 'hfEndpoint' | 'hfToken' | 'onnxDevice'>>,
  open: () => Promise<Backend>
): PullingBackend {
  const hub = hubLocation({ ...entry, hubRepo: entry.hubRepo! }, config)
  return new PullingBackend({
    id: entry.id,
    source: `${hub.endpoint}/${hub.repo}`,
    pullCommand: pullCommand(entry.id),
    pull: async (onEvent, signal) => {
      const pull = { hub, dir, dtype: (entry.dtype ?? DEFAULT_DTYPE) as ModelDtype, onEvent, signal }
      if (entry.source !== 'checkpoint') {
        await pullModel(pull)
        return
      }
      // The form for the device the model will run on (the engine's own choice of device follows).
      const { form } = await formForEntry(entry, config.onnxDevice ?? 'auto')
      await pullCheckpoint({ ...pull, form })
    },
    open,
  })
}

/**
 * The onnx factory with auto-pull around it: an entry with a hubRepo whose files are missing gets a
 * PullingBackend that downloads them, then builds the model with `create`.
 */
export function withAutoPull (create: BackendFactory<OnnxModelEntry>): BackendFactory<OnnxModelEntry> {
  return async (entry, ctx) => {
    const path = modelPath(entry, ctx.baseDir)
    if (!entry.hubRepo || !modelFilesMissing(path, entry.dtype)) return create(entry, ctx)
    return createPullingBackend(entry, path, ctx.config, () => create(entry, ctx))
  }
}
