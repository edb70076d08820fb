// Refused requests count too. A request the API refuses before generating
// (bad JSON, a failed validation, an unknown model, a wrong key) costs the
// server its parsing and checking on the main thread, which every stream
// shares, yet it never reaches the tier limits, which count admitted
// completions. So refusals are metered on their own, per API key and per
// client address (meters.ts: @fastify/rate-limit, in Redis with REDIS_URL, so
// replicas share the count):
// - each refused answer (a 4xx other than 429) adds one to its address and,
//   when a valid key sent it, to that key;
// - before anything else, key lookup and body included, a request whose
//   address or presented key has used its refusals for the minute gets 429
//   rate_limit_exceeded with Retry-After.
// Well-formed requests never add to these counts, and refusals never add to
// the tier's. A presented key's count is read before the key is checked, but
// only requests that key authenticated add to it, so nobody can exhaust
// another's key by sending garbage under its prefix.

import type { FastifyInstance, FastifyRequest } from 'fastify'
import { apiKeyPrefix, isWellFormedApiKey } from '../accounts/api-key-format.ts'
import { ApiError } from '../errors.ts'
import { xApiKey } from './auth.ts'
import { clientKey } from './client-address.ts'

export interface RefusalLimits {
  /** Refusals per API key per minute; 0: not metered. */
  key: number
  /** Refusals per client address per minute; 0: not metered. */
  address: number
}

/** A refusal as metered: a 4xx, except a rate limit's own 429. */
export function isRefusal (status: number): boolean {
  return status >= 400 && status < 500 && status !== 429
}

/** The display prefix of the key in the Authorization header (or x-api-key where read), when one that could be valid is there. */
function presentedPrefix (request: FastifyRequest): string | undefined {
  const match = /^\s*Bearer\s+(\S+)\s*$/i.exec(request.headers.authorization ?? '')
  const key = match?.[1] ?? (request.headers.authorization === undefined ? xApiKey(request) : undefined)
  return key !== undefined && isWellFormedApiKey(key) ? apiKeyPrefix(key) : undefined
}

function addressOf (request: FastifyRequest): string {
  return request.ip ? clientKey(request.ip) : 'unknown'
}

/** Adds the refusal meters to `api`, on which registerMeters has run. */
export function meterRefusals (api: FastifyInstance, limits: RefusalLimits): void {
  if (limits.key === 0 && limits.address === 0) return
  const meters = [
    limits.address > 0 && {
      what: 'client address',
      limit: api.createRateLimit({ max: limits.address, keyGenerator: request => `refused:address:${addressOf(request)}` }),
      checked: (_request: FastifyRequest) => true,
      counted: (_request: FastifyRequest) => true,
    },
    limits.key > 0 && {
      what: 'API key',
      limit: api.createRateLimit({ max: limits.key, keyGenerator: request => `refused:key:${request.apiKeyPrefix ?? presentedPrefix(request)}` }),
      checked: (request: FastifyRequest) => presentedPrefix(request) !== undefined,
      counted: (request: FastifyRequest) => request.apiKeyPrefix !== null,
    },
  ].filter(meter => meter !== false)

  api.addHook('onRequest', async request => {
    for (const meter of meters) {
      if (!meter.checked(request)) continue
      const state = await meter.limit(request, { increment: false })
      if (!state.isAllowed && state.remaining === 0 && state.ttl > 0) {
        const seconds = Math.max(1, state.ttlInSeconds)
        throw new ApiError('rate_limit_exceeded', `Too many refused requests from this ${meter.what}; retry in ${seconds} s (see REFUSED_PER_${meter.what === 'API key' ? 'KEY' : 'ADDRESS'}_PER_MINUTE).`, { headers: { 'retry-after': String(seconds) } })
      }
    }
  })

  // Counted before the answer leaves, so a client that waits for it and sends
  // again is checked against a count that already holds it.
  api.addHook('onSend', async (request, reply, payload) => {
    if (!isRefusal(reply.statusCode)) return payload
    for (const meter of meters) {
      if (meter.counted(request)) await meter.limit(request)
    }
    return payload
  })
}
