// Pulling a model from its original checkpoint (models.json
// `source: "checkpoint"`, the default model's way): download the safetensors
// checkpoint at the pinned revision, convert it here with chatd's own
// converter into the graph the engine runs fastest on the model's device (the
// CPU form or the GPU form: convert/model-forms.ts; the forms `npm run bench`
// measures), check that the result loads and runs, and only then move it
// into the model directory. The download resumes like any pull; an
// interrupted conversion starts over from the downloaded checkpoint, which is
// removed once the model is in place (unless asked to keep it).
import { existsSync, mkdirSync, readFileSync, readdirSync, renameSync, rmSync, statSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { Worker } from 'node:worker_threads'
import type { WeightFormat } from '../convert/decoder-graph.ts'
import { formHasPromptGraph, type ModelForm } from '../convert/model-forms.ts'
import { readModelDir, type ModelDtype } from '../engine/onnx/model-dir.ts'
import type { ConvertJob, ConvertMessage } from './convert-worker.ts'
import { PullError } from './errors.ts'
import type { RemoteFile } from './hub.ts'
import { acquirePullLock } from './lock.ts'
import { downloadRepoFiles, type PullEvent, type PullOptions, type PullResult } from './pull.ts'

/** Where the checkpoint is downloaded, inside the model directory. */
export const CHECKPOINT_DIR = 'checkpoint'
/** What the model directory was made from; a pull of the same source and revision leaves it alone. */
export const SOURCE_RECORD = 'chatd-source.json'
const PARTIAL_DIR = '.convert-partial'

/** The weight format chatd's converter writes for each dtype a checkpoint can become. */
export const CHECKPOINT_DTYPES: Partial<Record<ModelDtype, WeightFormat>> = { q4: 'int4', fp16: 'fp16', fp32: 'fp32' }

const REQUIRED = ['config.json', 'tokenizer.json', 'tokenizer_config.json']
const OPTIONAL = ['generation_config.json', 'special_tokens_map.json']
const WEIGHTS = /^model(-\d+-of-\d+)?\.safetensors$/

/** The files of a Hugging Face checkpoint that conversion reads: config, tokenizer, safetensors (one file or shards with their index). */
export function selectCheckpointFiles (listing: RemoteFile[], repo: string): RemoteFile[] {
  const byPath = new Map(listing.map(f => [f.path, f]))
  const missing = REQUIRED.filter(p => !byPath.has(p))
  if (missing.length > 0) throw new PullError(`${repo} lacks ${missing.join(', ')}: it is not a Hugging Face checkpoint`)
  const weights = listing.filter(f => WEIGHTS.test(f.path)).sort((a, b) => a.path.localeCompare(b.path, 'en', { numeric: true }))
  if (weights.length === 0) {
    throw new PullError(`${repo} has no model.safetensors (or model-NNNNN-of-NNNNN.safetensors shards): chatd converts safetensors checkpoints only`)
  }
  const index = byPath.get('model.safetensors.index.json')
  if (weights.length > 1 && !index) throw new PullError(`${repo} has sharded weights but no model.safetensors.index.json`)
  return [...REQUIRED.map(p => byPath.get(p)!), ...OPTIONAL.flatMap(p => byPath.get(p) ?? []), ...(index ? [index] : []), ...weights]
}

/** `form` is absent in records written before the GPU form: those are the CPU form. */
interface SourceRecord { repo: string; revision: string; dtype: string; form?: ModelForm; files: Array<{ path: string; sha256?: string; gitSha1?: string }> }

/** Bytes of every file under `dir`: the size of a model already in place. */
function directoryBytes (dir: string): number {
  return readdirSync(dir, { recursive: true, withFileTypes: true })
    .filter(entry => entry.isFile())
    .reduce((sum, entry) => sum + statSync(join(entry.parentPath, entry.name)).size, 0)
}

export interface CheckpointPullOptions extends PullOptions {
  /** The form to convert into, for the device the model will run on (default: the CPU form). */
  form?: ModelForm
  keepCheckpoint?: boolean
}

export async function pullCheckpoint (opts: CheckpointPullOptions): Promise<PullResult> {
  const weights = CHECKPOINT_DTYPES[opts.dtype]
  if (!weights) {
    throw new PullError(`dtype ${opts.dtype} cannot be made from a checkpoint: chatd's converter writes ${Object.keys(CHECKPOINT_DTYPES).join(', ')}`)
  }
  const form = opts.form ?? 'cpu'
  const emit = opts.onEvent ?? (() => {})
  if (convertedFrom(opts.dir, { repo: opts.hub.repo, revision: opts.hub.revision, dtype: opts.dtype, form }) && modelInPlace(opts.dir, opts.dtype, form, weights)) {
    // Nothing to report file by file: the caller says the model is complete.
    return { dir: opts.dir, files: [], totalBytes: directoryBytes(opts.dir), skipped: 0, alreadyComplete: true }
  }
  const release = acquirePullLock(opts.dir)
  try {
    const checkpointDir = join(opts.dir, CHECKPOINT_DIR)
    const download = await downloadRepoFiles({ ...opts, dir: checkpointDir, select: listing => selectCheckpointFiles(listing, opts.hub.repo) })
    const record: SourceRecord = {
      repo: opts.hub.repo,
      revision: opts.hub.revision,
      dtype: opts.dtype,
      form,
      files: download.files.map(f => ({ path: f.path, sha256: f.sha256, gitSha1: f.gitSha1 })),
    }
    const partial = join(opts.dir, PARTIAL_DIR)
    rmSync(partial, { recursive: true, force: true })
    await convertInWorker({ from: checkpointDir, out: partial, weights, dtype: opts.dtype, form }, emit, opts.signal)
    writeFileSync(join(partial, SOURCE_RECORD), JSON.stringify(record, null, 2) + '\n')
    // Verified: the new files replace whatever an earlier pull left.
    for (const name of readdirSync(partial)) {
      rmSync(join(opts.dir, name), { recursive: true, force: true })
      renameSync(join(partial, name), join(opts.dir, name))
    }
    rmSync(partial, { recursive: true, force: true })
    if (!opts.keepCheckpoint) rmSync(checkpointDir, { recursive: true, force: true })
    return { ...download, dir: opts.dir }
  } finally {
    release()
  }
}

/** What `dir` was converted from and into, as its source record says; null without one (or a broken one). */
export function convertedModel (dir: string): { repo: string; revision: string; dtype: string; form: ModelForm } | null {
  const file = join(dir, SOURCE_RECORD)
  if (!existsSync(file)) return null
  try {
    const record = JSON.parse(readFileSync(file, 'utf8')) as SourceRecord
    return { repo: record.repo, revision: record.revision, dtype: record.dtype, form: record.form ?? 'cpu' }
  } catch {
    return null
  }
}

/** Whether `dir` holds a model converted from this repository and revision, for this dtype, in this form. */
export function convertedFrom (dir: string, want: { repo: string; revision: string; dtype: string; form: ModelForm }): boolean {
  const record = convertedModel(dir)
  return record !== null && record.repo === want.repo && record.revision === want.revision && record.dtype === want.dtype && record.form === want.form
}

/** The model loads, with the int8 prompt graph where its form has one (a pull from before chatd wrote them converts again). */
function modelInPlace (dir: string, dtype: ModelDtype, form: ModelForm, weights: WeightFormat): boolean {
  try {
    return readModelDir(dir, dtype).promptOnnxPath !== null || !formHasPromptGraph(form, weights)
  } catch {
    return false
  }
}

function convertInWorker (job: ConvertJob, emit: (event: PullEvent) => void, signal?: AbortSignal): Promise<void> {
  mkdirSync(job.out, { recursive: true })
  emit({ type: 'convert-start', weights: job.weights })
  const worker = new Worker(new URL('./convert-worker.ts', import.meta.url), { workerData: job })
  return new Promise((resolve, reject) => {
    const stop = (): void => { void worker.terminate() }
    signal?.addEventListener('abort', stop, { once: true })
    let failure: Error | undefined
    worker.on('message', (message: ConvertMessage) => {
      switch (message.type) {
        case 'progress': emit({ type: 'convert-progress', tensors: message.tensors, total: message.total }); break
        case 'converted': emit({ type: 'convert-done', seconds: message.seconds }); break
        case 'verified': emit({ type: 'verified', seconds: message.seconds }); break
        case 'failed': failure = new PullError(`converting the checkpoint failed: ${message.message}`); break
      }
    })
    worker.once('error', err => { failure ??= new PullError(`converting the checkpoint failed: ${err.message}`) })
    worker.once('exit', code => {
      signal?.removeEventListener('abort', stop)
      if (signal?.aborted) reject(new PullError('conversion stopped; the next pull starts it again from the downloaded checkpoint'))
      else if (failure) reject(failure)
      else if (code !== 0) reject(new PullError(`the conversion worker exited with code ${code}`))
      else resolve()
    })
  })
}
