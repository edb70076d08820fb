// `chatd pull [<model id>...]`: fetch the files of local models from the hub
// named by their "hubRepo" in models.json, into the directory their "path"
// names. Bars on a terminal, plain lines otherwise (docker logs, CI).
// --if-missing skips models whose files are all present without contacting the
// hub, so compose's model-init step also passes on a restart without network.

import { readFileSync } from 'node:fs'
import { dirname, resolve } from 'node:path'
import type { Config } from '../config.ts'
import { DEFAULT_DTYPE, type ModelDtype } from '../engine/onnx/model-dir.ts'
import { modelDirLayout, modelPath, parseModelsFile, type OnnxModelEntry } from '../engine/models-file.ts'
import { modelFilesMissing } from './auto-pull.ts'
import { PullError } from './errors.ts'
import { hubLocation } from './model-source.ts'
import { formatBytes, lineReporter, terminalReporter } from './progress.ts'
import { convertedModel, pullCheckpoint } from './checkpoint.ts'
import { formForEntry } from './device-form.ts'
import { formName } from '../convert/model-forms.ts'
import { pullModel, type PullEvent } from './pull.ts'

export interface PullCommandOptions {
  out: (line: string) => void
  /** A terminal to draw bars on; plain lines to `out` when absent. */
  tty?: NodeJS.WriteStream
  signal?: AbortSignal
  /** Leave a model whose directory already holds every file alone, without asking the hub (an offline restart). */
  ifMissing?: boolean
  /** source "checkpoint": keep the downloaded checkpoint after converting it. */
  keepCheckpoint?: boolean
}

/** Pulls each model named (every local model with a hubRepo when none is). */
export async function runPullCommand (ids: string[], config: Config, opts: PullCommandOptions): Promise<void> {
  const entries = parseModelsFile(readFileSync(config.modelsFile, 'utf8'), config.env ?? process.env, config.modelsFile).map(p => p.entry)
  const baseDir = resolve(config.modelsDir ?? dirname(resolve(config.modelsFile)))
  const targets = ids.length > 0
    ? ids.map(id => {
      const entry = entries.find(e => e.id === id)
      if (!entry) throw new PullError(`no model with id ${id} in ${config.modelsFile}`)
      if (entry.backend !== 'onnx') throw new PullError(`${id} is served by an upstream server; there is nothing to download`)
      return entry
    })
    : entries.filter((e): e is OnnxModelEntry => e.backend === 'onnx' && e.hubRepo !== undefined)
  if (targets.length === 0) throw new PullError(`${config.modelsFile} has no local model with a "hubRepo" to pull`)

  for (const entry of targets) {
    const dir = modelPath(entry, baseDir)
    const dtype = (entry.dtype ?? DEFAULT_DTYPE) as ModelDtype
    if (!entry.hubRepo) {
      throw new PullError(`${entry.id} has no "hubRepo" in ${config.modelsFile}, so there is nowhere to download it from: add one, or put the model directory (${modelDirLayout(dtype)}) at ${dir}`)
    }
    const fromCheckpoint = entry.source === 'checkpoint'
    // A checkpoint becomes the form for the device the model will run on.
    const target = fromCheckpoint ? await formForEntry(entry, config.onnxDevice) : undefined
    if (opts.ifMissing && !modelFilesMissing(dir, dtype)) {
      opts.out(`${entry.id}: every file is already in ${dir}`)
      // Offline restarts must pass, so a model in the other form is left as it is, and said.
      const present = target ? convertedModel(dir)?.form : undefined
      if (target && present && present !== target.form) {
        opts.out(`note: ${entry.id} in ${dir} is ${formName(present)}, and ${target.why} runs ${formName(target.form)} faster: \`chatd pull ${entry.id}\` converts it again (downloading the checkpoint again)`)
      }
      continue
    }
    const hub = hubLocation({ ...entry, hubRepo: entry.hubRepo }, config)
    opts.out(target
      ? `pulling ${entry.id}: the checkpoint ${hub.endpoint}/${hub.repo} (${hub.revision}), converted here to dtype ${dtype} in ${formName(target.form)} (${target.why}), into ${dir}`
      : `pulling ${entry.id} from ${hub.endpoint}/${hub.repo} (${hub.revision}, dtype ${dtype}) into ${dir}`)
    if (!/^[0-9a-f]{40}$/.test(hub.revision)) {
      opts.out(`note: ${hub.revision} is a branch or tag, so a later pull may fetch other files; pin a full commit in "hubRevision" for the same files every time`)
    }
    const bars = opts.tty ? terminalReporter(opts.tty) : undefined
    const lines = lineReporter(opts.out)
    const onEvent = (event: PullEvent): void => {
      if (!bars) return lines(event)
      bars.onEvent(event)
      if (event.type === 'plan' || event.type === 'done') lines(event)
    }
    try {
      const pull = { hub, dir, dtype, onEvent, signal: opts.signal }
      const result = target ? await pullCheckpoint({ ...pull, form: target.form, keepCheckpoint: opts.keepCheckpoint }) : await pullModel(pull)
      bars?.stop()
      opts.out(result.alreadyComplete
        ? `${entry.id} is already complete in ${dir} (${formatBytes(result.totalBytes)}): nothing to download`
        : `${entry.id} is ready: ${result.files.length} files, ${formatBytes(result.totalBytes)} in ${dir}`)
    } finally {
      bars?.stop()
    }
  }
}
