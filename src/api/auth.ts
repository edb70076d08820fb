// Bearer-key authentication for /api/v1. Runs in onRequest, before the body is
// read or validated, so an unauthenticated caller learns nothing about the
// request schema and costs no parsing. Routes of Anthropic's Messages API take
// the key in `x-api-key` too (route config `xApiKey`), as its clients send it;
// everywhere else a key there is not read.

import type { FastifyRequest, onRequestAsyncHookHandler } from 'fastify'
import type { Account, Accounts } from '../accounts/accounts.ts'
import { ApiError } from '../errors.ts'

declare module 'fastify' {
  interface FastifyContextConfig {
    /** The route reads a key from `x-api-key` when no Authorization header is sent (the Messages API). */
    xApiKey?: boolean
  }
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

/** Whether the request's route reads a key from `x-api-key`. */
export function readsXApiKey (request: FastifyRequest): boolean {
  return request.routeOptions.config?.xApiKey === true
}

/** The key in `x-api-key` on a route that reads it; undefined when there is none (or it is blank). */
export function xApiKey (request: FastifyRequest): string | undefined {
  if (!readsXApiKey(request)) return undefined
  const header = request.headers['x-api-key']
  const value = (Array.isArray(header) ? header[0] : header)?.trim()
  return value === undefined || value === '' ? undefined : value
}

export function bearerAuth (accounts: Accounts): onRequestAsyncHookHandler {
  return async function authenticate (request) {
    // Authorization wins when both are sent: it is the header every route reads.
    const token = bearerToken(request) ?? xApiKey(request)
    if (token === undefined) {
      const how = readsXApiKey(request) ? '"x-api-key: <API key>" or "Authorization: Bearer <API key>"' : '"Authorization: Bearer <API key>"'
      throw new ApiError('missing_api_key', `Missing API key. Send it as ${how}.`, { headers: CHALLENGE })
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
