// Page guards: who may see a dashboard page.

import type { FastifyReply, FastifyRequest } from 'fastify'
import type { Account } from '../accounts/accounts.ts'

/** The logged-in account, or undefined after sending a redirect to the log-in page. */
export function requireUser (request: FastifyRequest, reply: FastifyReply): Account | undefined {
  if (request.user) return request.user
  void reply.redirect('/api/login', 303)
  return undefined
}

/** Form fields as strings: a field sent twice or not at all reads as ''. */
export function field (body: unknown, name: string): string {
  const value = (body as Record<string, unknown> | undefined)?.[name]
  return typeof value === 'string' ? value : ''
}
