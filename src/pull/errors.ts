// Every way a pull can fail, each with a message an operator can act on.
// Messages never contain HF_TOKEN.

/** Base class: an expected failure of `chatd pull` (exit 1, message only). */
export class PullError extends Error {
  constructor (message: string, options?: ErrorOptions) {
    super(message, options)
    this.name = 'PullError'
  }
}

/**
 * The hub (or mirror) could not be reached at all: DNS, refused connection, TLS, timeout.
 * The network error's whole chain is in the message, so it is not kept as `cause`
 * (a logger would append the chain a second time); `networkError` holds it.
 */
export class HubUnreachableError extends PullError {
  readonly networkError: unknown

  constructor (endpoint: string, networkError: unknown) {
    super(`could not reach the Hugging Face Hub at ${endpoint}: ${describeNetworkError(networkError)}`)
    this.name = 'HubUnreachableError'
    this.networkError = networkError
  }
}

/** The connection broke mid-file; what arrived is kept, and a retry resumes from it. */
export class DownloadInterruptedError extends PullError {
  constructor (message: string, options?: ErrorOptions) {
    super(message, options)
    this.name = 'DownloadInterruptedError'
  }
}

/** 401/403: a gated or private repository, and no token or a token without access. */
export class HubAuthError extends PullError {
  constructor (repo: string, status: number, hasToken: boolean) {
    super(hasToken
      ? `the Hugging Face Hub refused HF_TOKEN for ${repo} (HTTP ${status}): the token needs read access, and for a gated model its account must have accepted the model's terms on its page`
      : `${repo} is gated or private (HTTP ${status}): set HF_TOKEN to a Hugging Face access token whose account has access to it`)
    this.name = 'HubAuthError'
  }
}

/** A downloaded file whose size or hash differs from what the hub publishes; the file was removed. */
export class IntegrityError extends PullError {
  constructor (message: string) {
    super(message)
    this.name = 'IntegrityError'
  }
}

/** Node's fetch says only "fetch failed"; the useful part (ECONNREFUSED, ENOTFOUND...) is in its cause. */
export function describeNetworkError (err: unknown): string {
  const parts: string[] = []
  let e: unknown = err
  for (let depth = 0; e instanceof Error && depth < 4; depth++) {
    const code = (e as { code?: unknown }).code
    parts.push(typeof code === 'string' && !e.message.includes(code) ? `${e.message} (${code})` : e.message)
    e = e.cause
  }
  return parts.length > 0 ? parts.join(': ') : String(err)
}
