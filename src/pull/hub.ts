// What chatd asks of the Hugging Face Hub (or a mirror at HF_ENDPOINT): the
// file listing of a repository at a revision, with each file's size and the
// hash the hub publishes for it. @huggingface/hub does the listing (paging,
// auth header); the download itself is ours (download.ts), because it must
// resume, verify and write atomically.

import { HubApiError, listFiles } from '@huggingface/hub'
import { HubAuthError, HubUnreachableError, PullError } from './errors.ts'

export interface HubLocation {
  /** Base URL of the hub, without a trailing slash (HF_ENDPOINT). */
  endpoint: string
  /** "owner/name" */
  repo: string
  /** Branch, tag or commit; "main" by default. */
  revision: string
  /** HF_TOKEN; sent only to the hub itself. */
  token?: string
}

/** One file of a repository, as the hub describes it. */
export interface RemoteFile {
  /** Path inside the repository, "/"-separated. */
  path: string
  size: number
  /** SHA-256 of the content: the LFS object id, published for every large file. */
  sha256?: string
  /** Git blob id (SHA-1 of "blob <size>\0" + content): the content hash of a small (non-LFS) file. */
  gitSha1?: string
}

/** Lists every file of the repository, recursively. */
export async function listRepoFiles (hub: HubLocation): Promise<RemoteFile[]> {
  const files: RemoteFile[] = []
  try {
    for await (const entry of listFiles({
      repo: hub.repo,
      revision: hub.revision,
      recursive: true,
      hubUrl: hub.endpoint,
      ...(hub.token ? { accessToken: hub.token } : {}),
    })) {
      if (entry.type !== 'file') continue
      files.push({
        path: entry.path,
        size: entry.lfs?.size ?? entry.size,
        sha256: entry.lfs?.oid,
        // A large file's git oid is its pointer's, not its content's: only small files are checked by it.
        gitSha1: entry.lfs || entry.xetHash ? undefined : entry.oid,
      })
    }
  } catch (err) {
    throw hubError(err, hub)
  }
  return files
}

/** The URL that serves one file's content (the hub answers it with a redirect to its CDN). */
export function resolveUrl (hub: HubLocation, path: string): string {
  const encodedPath = path.split('/').map(encodeURIComponent).join('/')
  return `${hub.endpoint}/${hub.repo}/resolve/${encodeURIComponent(hub.revision)}/${encodedPath}`
}

/** Turns what the hub client or fetch threw, or an HTTP status, into a PullError that says what to do. */
export function hubError (err: unknown, hub: HubLocation, status?: number): PullError {
  const code = status ?? (err instanceof HubApiError ? err.statusCode : undefined)
  if (code === 401 || code === 403) return new HubAuthError(hub.repo, code, hub.token !== undefined)
  if (code === 404) {
    return new PullError(`${hub.repo} (revision ${hub.revision}) was not found on ${hub.endpoint}: check the model's "hubRepo" in models.json (a private repository also answers 404 without HF_TOKEN)`)
  }
  if (code !== undefined) return new PullError(`the Hugging Face Hub at ${hub.endpoint} answered HTTP ${code} for ${hub.repo}`)
  if (err instanceof TypeError && /access token/.test(err.message)) {
    return new PullError(`HF_TOKEN is not a Hugging Face access token: ${err.message}`)
  }
  if (err instanceof PullError) return err
  return new HubUnreachableError(hub.endpoint, err)
}
