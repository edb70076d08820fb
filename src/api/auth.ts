// Bearer-key authentication for /api/v1. Runs in onRequest, before the body is
// read or validated, so an unauthenticated caller learns nothing about the
// request schema and costs no parsing.

import type { FastifyRequest, onRequestAsyncHookHandler } from 'fastify'
import type { Account, Accounts } from '../accounts/accounts.ts'
import { ApiError } from '../errors.ts'

declare module 'fastify' {
  interface FastifyRequest {
    /** The authenticated account; set by the bearer-key hook on /api/v1 routes. */
    account: Account | null
    /** The display prefix of the key that authenticated the request (usage records name it). */
    apiKeyPrefix: string | null
  }
}

const CHALLENGE = { 'www-authenticate': 'Bearer' }

function bearerToken (request: FastifyRequest): string | undefined {
  const header = request.headers.authorization
  // An absent header, an empty one and a bare "Bearer" all mean: no key sent.
  if (header === undefined || /^\s*(Bearer\s*)?$/i.test(header)) return undefined
  const match = /^Bearer\s+(\S+)\s*$/i.exec(header)
  if (!match) throw new ApiError('invalid_api_key', 'The Authorization header must be "Bearer <API key>".', { headers: CHALLENGE })
  return match[1]
}

export function bearerAuth (accounts: Accounts): onRequestAsyncHookHandler {
  return async function authenticate (request) {
    const token = bearerToken(request)
    if (token === undefined) {
      throw new ApiError('missing_api_key', 'Missing API key. Send it as "Authorization: Bearer <API key>".', { headers: CHALLENGE })
    }
    const result = await accounts.authenticate(token)
    if (!result.ok) {
      const message = result.reason === 'revoked' ? 'This API key has been revoked.' : 'Invalid API key.'
      throw new ApiError('invalid_api_key', message, { headers: CHALLENGE })
    }
    request.account = result.account
    request.apiKeyPrefix = result.keyPrefix
  }
}
