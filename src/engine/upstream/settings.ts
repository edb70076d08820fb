// How chatd waits for OpenAI-compatible upstreams (UPSTREAM_* in config.ts).

export interface UpstreamSettings {
  /** TCP (and TLS) connect, per attempt. */
  connectTimeoutMs: number
  /** From sending the request to the response's status line and headers, per attempt. */
  firstByteTimeoutMs: number
  /** Longest silence inside the response body (a streaming reply, or a whole JSON one). */
  idleTimeoutMs: number
  /** Extra attempts after a failure that happened before the upstream sent anything. */
  retries: number
}

export const DEFAULT_UPSTREAM_SETTINGS: UpstreamSettings = {
  connectTimeoutMs: 10_000,
  firstByteTimeoutMs: 60_000,
  idleTimeoutMs: 60_000,
  retries: 2,
}
