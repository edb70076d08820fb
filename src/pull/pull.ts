// Pulling a model: list the repository, pick the files the model's dtype
// needs, skip those already complete, download the rest one by one (resuming,
// verifying, retrying a broken connection), and report progress as events that
// a terminal bar, a log, or the server's readiness endpoint can show. A model
// whose source is a checkpoint (models.json `source: "checkpoint"`) is then
// converted locally: checkpoint.ts.

import { existsSync, statSync } from 'node:fs'
import { join } from 'node:path'
import type { ModelDtype } from '../engine/onnx/model-dir.ts'
import { downloadFile, partialSize } from './download.ts'
import { DownloadInterruptedError, HubUnreachableError, PullError } from './errors.ts'
import { listRepoFiles, resolveUrl, type HubLocation, type RemoteFile } from './hub.ts'
import { acquirePullLock } from './lock.ts'
import { selectModelFiles } from './model-files.ts'

export type PullEvent =
  | { type: 'plan'; files: RemoteFile[]; present: RemoteFile[]; totalBytes: number }
  | { type: 'file-start'; file: RemoteFile; resumeFrom: number; attempt: number }
  | { type: 'file-progress'; file: RemoteFile; bytes: number }
  | { type: 'file-done'; file: RemoteFile; seconds: number }
  | { type: 'retry'; file: RemoteFile; error: PullError; delayMs: number }
  | { type: 'done'; seconds: number; files: number; totalBytes: number }
  // A checkpoint's conversion into chatd's graph (checkpoint.ts), then the check that it runs.
  | { type: 'convert-start'; weights: string }
  | { type: 'convert-progress'; tensors: number; total: number }
  | { type: 'convert-done'; seconds: number }
  | { type: 'verified'; seconds: number }

export interface DownloadOptions {
  hub: HubLocation
  /** The directory to fill. */
  dir: string
  onEvent?: (event: PullEvent) => void
  signal?: AbortSignal
  /** Further attempts after a broken connection, each resuming where the last stopped. */
  retries?: number
  /** Wait before the first retry; doubles each time. */
  retryDelayMs?: number
}

export interface PullOptions extends DownloadOptions {
  dtype: ModelDtype
}

export interface PullResult {
  dir: string
  files: RemoteFile[]
  /** Bytes of the whole model on disk. */
  totalBytes: number
  /** Files that were already complete. */
  skipped: number
  /** Nothing had to be fetched or converted: the model was complete already. */
  alreadyComplete?: boolean
}

/** Downloads an ONNX model directory (onnx-community layout) for `dtype`. */
export function pullModel (opts: PullOptions): Promise<PullResult> {
  return downloadRepoFiles({ ...opts, select: listing => selectModelFiles(listing, opts.dtype, opts.hub.repo) })
}

/** Downloads the files `select` picks from the repository's listing into `dir`. */
export async function downloadRepoFiles (opts: DownloadOptions & { select: (listing: RemoteFile[]) => RemoteFile[] }): Promise<PullResult> {
  const started = performance.now()
  const emit = opts.onEvent ?? (() => {})
  const files = opts.select(await listRepoFiles(opts.hub))
  // A file under its final name was renamed there only after verification (download.ts), so its size is proof enough.
  const isComplete = (f: RemoteFile): boolean => {
    const dest = join(opts.dir, f.path)
    return existsSync(dest) && statSync(dest).size === f.size
  }
  const present = files.filter(isComplete)
  const totalBytes = files.reduce((sum, f) => sum + f.size, 0)
  emit({ type: 'plan', files, present, totalBytes })

  const release = acquirePullLock(opts.dir)
  try {
    for (const file of files) {
      if (present.includes(file)) continue
      const fileStarted = performance.now()
      await withRetries(opts, file, async attempt => {
        const dest = join(opts.dir, file.path)
        emit({ type: 'file-start', file, resumeFrom: await partialSize(dest), attempt })
        await downloadFile({
          hub: opts.hub,
          url: resolveUrl(opts.hub, file.path),
          file,
          dest,
          signal: opts.signal,
          onBytes: bytes => emit({ type: 'file-progress', file, bytes }),
        })
      })
      emit({ type: 'file-done', file, seconds: (performance.now() - fileStarted) / 1000 })
    }
  } finally {
    release()
  }
  emit({ type: 'done', seconds: (performance.now() - started) / 1000, files: files.length, totalBytes })
  return { dir: opts.dir, files, totalBytes, skipped: present.length, alreadyComplete: present.length === files.length }
}

async function withRetries (opts: DownloadOptions, file: RemoteFile, attempt: (n: number) => Promise<void>): Promise<void> {
  const retries = opts.retries ?? 3
  let delay = opts.retryDelayMs ?? 1000
  for (let n = 1; ; n++) {
    try {
      await attempt(n)
      return
    } catch (err) {
      const transient = err instanceof DownloadInterruptedError || err instanceof HubUnreachableError
      if (!transient || n > retries || opts.signal?.aborted) throw err
      opts.onEvent?.({ type: 'retry', file, error: err, delayMs: delay })
      await new Promise(resolve => setTimeout(resolve, delay))
      delay *= 2
    }
  }
}
