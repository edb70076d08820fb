// CSRF tokens for the dashboard's forms (@fastify/csrf-protection), bound to
// the browser's session.
//
// The token's secret lives in a signed HttpOnly cookie. On its own that would
// let anyone who can plant a cookie in a victim's browser (a sibling
// subdomain, a plain-HTTP response on the way) pair a secret with a token they
// fetched for themselves. So each token also carries an HMAC of the session
// cookie it was made for: a form is accepted only from the session that
// rendered it, and a token made before log-in is worthless after it.

import { createHmac } from 'node:crypto'
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify'
import csrf from '@fastify/csrf-protection'
import { sessionToken } from './session-cookie.ts'

export const CSRF_COOKIE = 'chatd_csrf'

/** What a token is bound to: the session cookie as sent (valid or not), or the visitor's lack of one. */
function boundTo (request: FastifyRequest): string {
  const session = sessionToken(request)
  return session === undefined ? 'anonymous' : `session:${session}`
}

export async function csrfProtection (app: FastifyInstance, opts: { cookieSecret: string; secure: 'auto' | boolean }): Promise<void> {
  await app.register(csrf, {
    sessionPlugin: '@fastify/cookie',
    cookieKey: CSRF_COOKIE,
    cookieOpts: { path: '/api', httpOnly: true, sameSite: 'lax', secure: opts.secure, signed: true },
    getUserInfo: boundTo,
    // Its own key, derived from the cookie secret, so every replica makes and checks the same tokens.
    csrfOpts: { hmacKey: createHmac('sha256', opts.cookieSecret).update('chatd csrf session binding').digest() },
  })
}

/** A token for a form on the page this reply renders. */
export function formToken (reply: FastifyReply): string {
  return reply.generateCsrf({ userInfo: boundTo(reply.request) })
}
