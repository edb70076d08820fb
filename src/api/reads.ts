// Reads that count against no tier limit (GET /usage, GET /models, GET
// /models/{id}, DELETE /responses/{id}) are metered per account, so that
// polling one's usage never uses up the tier's minute, yet one account cannot
// keep the server's thread busy answering them: past READS_PER_ACCOUNT_PER_MINUTE
// such a request gets 429 rate_limit_exceeded with Retry-After before its
// handler runs. Per account rather than per key: an account holds several keys.
// A route opts in with the route config `meteredRead`.

import type { FastifyInstance } from 'fastify'
import { ApiError } from '../errors.ts'

declare module 'fastify' {
  interface FastifyContextConfig {
    /** The route counts against no tier limit; the reads meter bounds it per account. */
    meteredRead?: boolean
  }
}

/** Adds the reads meter to `api`, on which registerMeters has run and whose routes authenticate in onRequest. */
export function meterReads (api: FastifyInstance, perAccountPerMinute: number): void {
  if (perAccountPerMinute === 0) return
  const limit = api.createRateLimit({ max: perAccountPerMinute, keyGenerator: request => `read:account:${request.account!.id}` })
  // preHandler: after the key is checked and the request validated (a refused
  // one is the refusals meter's), before the handler's work.
  api.addHook('preHandler', async request => {
    if (request.routeOptions.config?.meteredRead !== true || !request.account) return
    const state = await limit(request)
    if (!state.isAllowed && state.isExceeded) { // isAllowed: only an allowList's keys, none here
      const seconds = Math.max(1, state.ttlInSeconds)
      throw new ApiError('rate_limit_exceeded', `Too many reads of usage, models or stored responses by this account: ${perAccountPerMinute} a minute; retry in ${seconds} s (see READS_PER_ACCOUNT_PER_MINUTE).`, { headers: { 'retry-after': String(seconds) } })
    }
  })
}
