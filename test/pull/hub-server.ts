// A loopback stand-in for the Hugging Face Hub, speaking the endpoints chatd
// uses: the tree listing (sizes, git oids, LFS sha256), and resolve/<rev>/<path>
// with a redirect to a "CDN" path that honours Range. Faults on demand: a gated
// repository (401 without the token), a connection cut mid-file, a file whose
// bytes differ from the published hash.

import { createHash } from 'node:crypto'
import { readdirSync, readFileSync, statSync } from 'node:fs'
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http'
import type { AddressInfo } from 'node:net'
import { basename, join, relative } from 'node:path'

export interface HubRepo {
  files: Map<string, Buffer>
  /** 401 for listing and downloads without `Authorization: Bearer <token>`. */
  gated?: boolean
  /** path -> bytes after which the next download of that file is cut (once). */
  cutOnce?: Map<string, number>
  /**
   * Resolves once the client holds the bytes sent before a cut (the test watches its .partial
   * file): only then is the connection dropped. A client reading late loses what it had not read
   * when the connection failed, so a cut on a timer alone tested a resume of nothing on a busy machine.
   */
  cutWhen?: (path: string, bytes: number) => Promise<void>
  /** Paths served with one byte flipped (the listing keeps the true hash). */
  corrupt?: Set<string>
  /** path -> the next download of that file sends `bytes`, then waits for `release` before sending the rest (once). */
  holdOnce?: Map<string, { bytes: number; release: Promise<void> }>
}

export interface HubRequest {
  method: string
  url: string
  range?: string
  authorization?: string
}

export interface FakeHub {
  url: string
  repos: Map<string, HubRepo>
  requests: HubRequest[]
  /** Requests for file content (the CDN path), in order. */
  downloads: () => HubRequest[]
  close: () => Promise<void>
}

/** Every file under `dir` (except dotfiles), keyed by its "/"-separated repository path. */
export function repoFromDir (dir: string, extra: Record<string, Buffer | string> = {}): HubRepo {
  const files = new Map<string, Buffer>()
  const walk = (d: string): void => {
    for (const name of readdirSync(d).sort()) {
      if (name.startsWith('.')) continue
      const full = join(d, name)
      if (statSync(full).isDirectory()) walk(full)
      else files.set(relative(dir, full).split('\\').join('/'), readFileSync(full))
    }
  }
  walk(dir)
  for (const [path, content] of Object.entries(extra)) files.set(path, Buffer.from(content))
  return { files }
}

/** Git LFS holds the big files on the real hub; here: the ONNX graphs and their data. */
const isLfs = (path: string): boolean => /\.onnx(_data.*|\.data)?$|\.safetensors$/.test(path)

function listing (repo: HubRepo) {
  const dirs = new Set<string>()
  const entries: object[] = []
  for (const [path, content] of repo.files) {
    const parts = path.split('/')
    for (let i = 1; i < parts.length; i++) dirs.add(parts.slice(0, i).join('/'))
    const gitOid = createHash('sha1').update(`blob ${content.length}\0`).update(content).digest('hex')
    entries.push(isLfs(path)
      ? { type: 'file', path, size: content.length, oid: createHash('sha1').update(path).digest('hex'), lfs: { oid: createHash('sha256').update(content).digest('hex'), size: content.length, pointerSize: 134 } }
      : { type: 'file', path, size: content.length, oid: gitOid })
  }
  return [...[...dirs].map(path => ({ type: 'directory', path, size: 0, oid: createHash('sha1').update(path).digest('hex') })), ...entries]
}

export async function startHub (repos: Record<string, HubRepo>, opts: { token?: string } = {}): Promise<FakeHub> {
  const token = opts.token ?? 'hf_loopbacktesttoken'
  const repoMap = new Map(Object.entries(repos))
  const requests: HubRequest[] = []

  const server = createServer((req: IncomingMessage, res: ServerResponse) => {
    const url = new URL(req.url ?? '/', 'http://hub')
    requests.push({ method: req.method ?? 'GET', url: url.pathname + url.search, range: req.headers.range, authorization: req.headers.authorization })
    const deny = (repo: HubRepo, name: string): boolean => {
      if (!repo.gated || req.headers.authorization === `Bearer ${token}`) return false
      res.writeHead(req.headers.authorization ? 403 : 401, { 'content-type': 'application/json' })
      res.end(JSON.stringify({ error: `Access to model ${name} is restricted. You must have access to it and be authenticated to access it. Please log in.` }))
      return true
    }
    const notFound = (): void => {
      res.writeHead(404, { 'content-type': 'application/json' })
      res.end(JSON.stringify({ error: 'Repository not found' }))
    }

    let m = /^\/api\/models\/([^/]+\/[^/]+)\/tree\/([^/]+)\/?$/.exec(url.pathname)
    if (m) {
      const repo = repoMap.get(m[1])
      if (!repo) return notFound()
      if (deny(repo, m[1])) return
      res.writeHead(200, { 'content-type': 'application/json' })
      res.end(JSON.stringify(listing(repo)))
      return
    }
    m = /^\/([^/]+\/[^/]+)\/resolve\/([^/]+)\/(.+)$/.exec(url.pathname)
    if (m) {
      const repo = repoMap.get(m[1])
      if (!repo) return notFound()
      if (deny(repo, m[1])) return
      const path = m[3].split('/').map(decodeURIComponent).join('/')
      if (!repo.files.has(path)) return notFound()
      // The real hub redirects LFS files to its CDN.
      if (isLfs(path)) {
        res.writeHead(302, { location: `/cdn/${m[1]}/${m[3]}` })
        res.end()
        return
      }
      return serveContent(req, res, repo, path)
    }
    m = /^\/cdn\/([^/]+\/[^/]+)\/(.+)$/.exec(url.pathname)
    if (m) {
      const repo = repoMap.get(m[1])
      const path = m[2].split('/').map(decodeURIComponent).join('/')
      if (!repo?.files.has(path)) return notFound()
      return serveContent(req, res, repo, path)
    }
    notFound()
  })
  await new Promise<void>(resolve => server.listen(0, '127.0.0.1', resolve))
  const port = (server.address() as AddressInfo).port
  return {
    url: `http://127.0.0.1:${port}`,
    repos: repoMap,
    requests,
    downloads: () => requests.filter(r => r.url.startsWith('/cdn/') || (r.url.includes('/resolve/') && !isLfs(r.url))),
    close: () => new Promise(resolve => {
      server.closeAllConnections()
      server.close(() => resolve())
    }),
  }
}

function serveContent (req: IncomingMessage, res: ServerResponse, repo: HubRepo, path: string): void {
  let content = repo.files.get(path)!
  if (repo.corrupt?.has(path)) {
    content = Buffer.from(content)
    content[Math.floor(content.length / 2)] ^= 0xff
  }
  let start = 0
  const range = /^bytes=(\d+)-$/.exec(req.headers.range ?? '')
  if (range) {
    start = Number(range[1])
    if (start >= content.length) {
      res.writeHead(416, { 'content-range': `bytes */${content.length}` })
      res.end()
      return
    }
    res.writeHead(206, { 'content-length': content.length - start, 'content-range': `bytes ${start}-${content.length - 1}/${content.length}`, 'accept-ranges': 'bytes' })
  } else {
    res.writeHead(200, { 'content-length': content.length, 'accept-ranges': 'bytes' })
  }
  const cutAt = repo.cutOnce?.get(path)
  if (cutAt !== undefined && cutAt > start) {
    repo.cutOnce!.delete(path)
    // Send part of the body, then drop the connection, as a network failure would.
    const received = repo.cutWhen?.(path, cutAt - start) ?? new Promise<void>(resolve => setTimeout(resolve, 20))
    res.write(content.subarray(start, cutAt), () => { void received.then(() => req.socket.destroy()) })
    return
  }
  const hold = repo.holdOnce?.get(path)
  if (hold !== undefined && hold.bytes > start) {
    repo.holdOnce!.delete(path)
    res.write(content.subarray(start, hold.bytes))
    void hold.release.then(() => res.end(content.subarray(hold.bytes)))
    return
  }
  res.end(content.subarray(start))
}

/**
 * For `cutWhen`: resolves once a file named `<name>.partial` under `root` (any depth) holds at
 * least `bytes` bytes, or after `timeoutMs` (the test's own assertions then say what is missing).
 */
export async function partialReaches (root: string, name: string, bytes: number, timeoutMs = 30_000): Promise<void> {
  const deadline = Date.now() + timeoutMs
  const target = basename(name) + '.partial'
  while (Date.now() < deadline) {
    try {
      for (const entry of readdirSync(root, { recursive: true, withFileTypes: true })) {
        if (entry.isFile() && entry.name === target && statSync(join(entry.parentPath, entry.name)).size >= bytes) return
      }
    } catch {} // not made yet, or a file renamed while listed: look again
    await new Promise(resolve => setTimeout(resolve, 10))
  }
}
