// Headers every response carries, whoever answers it: the JSON API, its
// errors and 404s, health, metrics, docs and the dashboard (which adds its own
// stricter set in src/dashboard/security-headers.ts).
//
// nosniff: a browser must take a response as the Content-Type it declares, so
// a JSON error body that echoes a request field can never be run as a script
// or rendered as HTML.
//
// HSTS only on a response to a request that came over HTTPS, directly or per
// X-Forwarded-Proto from a trusted proxy (TRUST_PROXY), the rule
// COOKIE_SECURE=auto follows too: browsers ignore it over plain HTTP, and it
// would claim a TLS setup the server cannot see.

import type { FastifyInstance } from 'fastify'

/** helmet's default value: a year, subdomains included. */
export const HSTS = 'max-age=31536000; includeSubDomains'

export function installBaselineHeaders (app: FastifyInstance): void {
  app.addHook('onSend', async (request, reply, payload) => {
    reply.header('x-content-type-options', 'nosniff')
    if (request.protocol === 'https') reply.header('strict-transport-security', HSTS)
    return payload
  })
}
