// A browser's part of the dashboard for inject()-level tests: a cookie jar
// and the form's CSRF token, read from the page like a browser would post it.

import type { FastifyInstance, LightMyRequestResponse } from 'fastify'

export class Browser {
  readonly cookies = new Map<string, string>()
  readonly app: FastifyInstance
  /** Sent as X-Forwarded-Proto (with TRUST_PROXY) to act as a client behind a TLS proxy. */
  forwardedProto?: string
  /** Sent with every request (a Host header, a proxy's X-Forwarded-Host). */
  headers: Record<string, string> = {}

  constructor (app: FastifyInstance) {
    this.app = app
  }

  #remember (res: LightMyRequestResponse): void {
    for (const c of res.cookies as Array<{ name: string; value: string; maxAge?: number; expires?: Date }>) {
      const gone = c.maxAge === 0 || (c.expires !== undefined && c.expires.getTime() <= Date.now()) || c.value === ''
      if (gone) this.cookies.delete(c.name)
      else this.cookies.set(c.name, c.value)
    }
  }

  #headers (): Record<string, string> {
    const headers: Record<string, string> = { ...this.headers }
    if (this.cookies.size > 0) headers.cookie = [...this.cookies].map(([k, v]) => `${k}=${v}`).join('; ')
    if (this.forwardedProto) headers['x-forwarded-proto'] = this.forwardedProto
    return headers
  }

  /** Any request, sent with this browser's cookies; it keeps the cookies the answer sets. */
  async send (opts: { method: 'GET' | 'POST', url: string, headers?: Record<string, string>, payload?: string | Buffer }): Promise<LightMyRequestResponse> {
    const res = await this.app.inject({ ...opts, headers: { ...this.#headers(), ...opts.headers } })
    this.#remember(res)
    return res
  }

  async get (url: string): Promise<LightMyRequestResponse> {
    return this.send({ method: 'GET', url })
  }

  /** Posts a form; `csrf: true` takes the token from the page at `from` first, as a browser would. */
  async post (url: string, form: Record<string, string>, opts: { csrfFrom?: string } = {}): Promise<LightMyRequestResponse> {
    const fields = { ...form }
    if (opts.csrfFrom) fields._csrf = csrfToken((await this.get(opts.csrfFrom)).body)
    return this.send({ method: 'POST', url, headers: { 'content-type': 'application/x-www-form-urlencoded' }, payload: new URLSearchParams(fields).toString() })
  }
}

export function csrfToken (html: string): string {
  const match = /name="_csrf" value="([^"]+)"/.exec(html)
  if (!match) throw new Error('no CSRF token on the page')
  return match[1]
}
