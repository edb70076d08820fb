// One file from the hub to disk: resumable, verified, atomic.
//
// Bytes go to "<dest>.partial". A rerun after an interruption asks the server
// for the rest (Range) and appends. Only when the size and the hash the hub
// publishes both match is the file renamed to its final name, so a file under
// its real name is always complete and correct; a mismatch removes the partial.

import { createHash, type Hash } from 'node:crypto'
import { createReadStream } from 'node:fs'
import { mkdir, open, rename, rm, stat } from 'node:fs/promises'
import { dirname } from 'node:path'
import { hubError, type HubLocation, type RemoteFile } from './hub.ts'
import { describeNetworkError, DownloadInterruptedError, IntegrityError, PullError } from './errors.ts'

export interface DownloadOptions {
  hub: HubLocation
  url: string
  file: RemoteFile
  dest: string
  /** Called with the bytes of this file on disk so far, as they grow. */
  onBytes?: (bytesOnDisk: number) => void
  signal?: AbortSignal
}

export const PARTIAL_SUFFIX = '.partial'

/** Bytes already on disk from an earlier, interrupted attempt. */
export async function partialSize (dest: string): Promise<number> {
  return (await stat(dest + PARTIAL_SUFFIX).catch(() => undefined))?.size ?? 0
}

/** Downloads `file` to `dest`, resuming a partial download. Resolves once `dest` holds the verified file. */
export async function downloadFile (opts: DownloadOptions): Promise<void> {
  const { file, dest } = opts
  const partial = dest + PARTIAL_SUFFIX
  await mkdir(dirname(dest), { recursive: true })

  let have = await partialSize(dest)
  if (have > file.size) {
    // Longer than the file can be: left by another revision. Start over.
    await rm(partial, { force: true })
    have = 0
  }
  const hash = newHash(file)
  if (have > 0) await hashExisting(hash, partial)

  if (have < file.size) {
    const res = await request(opts, have)
    // 206: the rest, as asked. 200: the server sent the whole file (no range support): start over.
    if (res.status === 200 && have > 0) {
      have = 0
      hash.reset()
    }
    const fh = await open(partial, have === 0 ? 'w' : 'a')
    try {
      opts.onBytes?.(have)
      try {
        for await (const chunk of res.body as unknown as AsyncIterable<Uint8Array>) {
          if (have + chunk.length > file.size) throw new IntegrityError(`${file.path}: the server sent more than the ${file.size} bytes the hub lists`)
          await fh.write(chunk)
          hash.update(chunk)
          have += chunk.length
          opts.onBytes?.(have)
        }
      } catch (err) {
        if (err instanceof PullError) throw err
        if (opts.signal?.aborted) throw new PullError(`download of ${file.path} stopped`, { cause: err })
        // The error's text is in the message; no `cause`, so a log line does not repeat it.
        throw new DownloadInterruptedError(`download of ${file.path} was interrupted after ${have} of ${file.size} bytes (${describeNetworkError(err)}); run the same command again to resume`)
      }
      await fh.sync()
    } finally {
      await fh.close()
    }
  } else {
    opts.onBytes?.(have)
  }

  if (have !== file.size) {
    await rm(partial, { force: true })
    throw new IntegrityError(`${file.path}: got ${have} bytes, the hub lists ${file.size}; the partial file was removed, run the same command again`)
  }
  const digest = hash.digest()
  if (digest.actual !== digest.expected) {
    await rm(partial, { force: true })
    throw new IntegrityError(`${file.path}: ${digest.name} mismatch (expected ${digest.expected}, got ${digest.actual}); the corrupt download was removed, run the same command again`)
  }
  await rename(partial, dest)
}

/** GET with a Range from `from`, following the hub's redirect to its CDN. */
async function request (opts: DownloadOptions, from: number): Promise<Response> {
  const headers: Record<string, string> = {}
  // fetch drops Authorization when a redirect leaves the hub's origin, so the token never reaches the CDN.
  if (opts.hub.token) headers.authorization = `Bearer ${opts.hub.token}`
  if (from > 0) headers.range = `bytes=${from}-`
  let res: Response
  try {
    res = await fetch(opts.url, { headers, redirect: 'follow', signal: opts.signal })
  } catch (err) {
    if (opts.signal?.aborted) throw new PullError(`download of ${opts.file.path} stopped`, { cause: err })
    throw hubError(err, opts.hub)
  }
  if (res.status === 206) {
    const range = res.headers.get('content-range') ?? ''
    if (!range.startsWith(`bytes ${from}-`)) {
      await res.body?.cancel()
      throw new PullError(`${opts.file.path}: the server answered range ${from}- with "${range}"`)
    }
    return res
  }
  if (res.status === 200) return res
  await res.body?.cancel()
  if (res.status === 416) {
    // Our partial does not fit the file the server has now: drop it so the next run starts clean.
    await rm(opts.dest + PARTIAL_SUFFIX, { force: true })
  }
  throw hubError(undefined, opts.hub, res.status)
}

interface Verifier {
  update (chunk: Uint8Array): void
  reset (): void
  digest (): { name: string; expected: string; actual: string }
}

/** SHA-256 when the hub publishes it (LFS files), else the git blob SHA-1; sizes are checked either way. */
function newHash (file: RemoteFile): Verifier {
  const make = (): Hash => {
    if (file.sha256) return createHash('sha256')
    const h = createHash('sha1')
    h.update(`blob ${file.size}\0`)
    return h
  }
  let h = make()
  return {
    update: chunk => { h.update(chunk) },
    reset: () => { h = make() },
    digest: () => file.sha256
      ? { name: 'sha256', expected: file.sha256, actual: h.digest('hex') }
      : file.gitSha1
        ? { name: 'git blob sha1', expected: file.gitSha1, actual: h.digest('hex') }
        : { name: 'hash', expected: '', actual: '' },
  }
}

async function hashExisting (hash: Verifier, path: string): Promise<void> {
  for await (const chunk of createReadStream(path)) hash.update(chunk as Buffer)
}
