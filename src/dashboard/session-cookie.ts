// The dashboard's session cookie: a random token (sessions.ts keeps its hash)
// in an HttpOnly, SameSite=Lax cookie scoped to /api. Lax rather than Strict
// so following a link to the dashboard from elsewhere finds you logged in;
// cross-site form posts still carry no cookie, and every form also needs its
// CSRF token. Secure follows COOKIE_SECURE (see .env.example).

import type { FastifyReply, FastifyRequest } from 'fastify'
import type { CookieSerializeOptions } from '@fastify/cookie'

export const SESSION_COOKIE = 'chatd_session'

export function cookieOptions (secure: 'auto' | boolean, maxAgeMs?: number): CookieSerializeOptions {
  return {
    path: '/api',
    httpOnly: true,
    sameSite: 'lax',
    secure,
    ...(maxAgeMs !== undefined ? { maxAge: Math.floor(maxAgeMs / 1000) } : {}),
  }
}

export function sessionToken (request: FastifyRequest): string | undefined {
  return request.cookies[SESSION_COOKIE] || undefined
}

export function setSessionCookie (reply: FastifyReply, token: string, secure: 'auto' | boolean, maxAgeMs: number): void {
  reply.setCookie(SESSION_COOKIE, token, cookieOptions(secure, maxAgeMs))
}

export function clearSessionCookie (reply: FastifyReply, secure: 'auto' | boolean): void {
  reply.clearCookie(SESSION_COOKIE, cookieOptions(secure))
}
