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

  async get (url: string): Promise<LightMyRequestResponse> {
    const res = await this.app.inject({ url, headers: this.#headers() })
    this.#remember(res)
    return res
  }

  /** Posts a form; `csrf: true` takes the token from the page at `from` first, as a browser would. */
  async post (url: string, form: Record<string, string>, opts: { csrfFrom?: string } = {}): Promise<LightMyRequestResponse> {
    const fields = { ...form }
    if (opts.csrfFrom) fields._csrf = csrfToken((await this.get(opts.csrfFrom)).body)
    const res = await this.app.inject({
      method: 'POST',
      url,
      headers: { ...this.#headers(), 'content-type': 'application/x-www-form-urlencoded' },
      payload: new URLSearchParams(fields).toString(),
    })
    this.#remember(res)
    return res
  }
}

export function csrfToken (html: string): string {
  const match = /name="_csrf" value="([^"]+)"/.exec(html)
  if (!match) throw new Error('no CSRF token on the page')
  return match[1]
}
