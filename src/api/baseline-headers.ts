// Headers every response carries, whoever answers it: the JSON API, its
// errors and 404s, health, metrics, docs and the dashboard (which adds its own
// stricter set in src/dashboard/security-headers.ts).
//
// nosniff: a browser must take a response as the Content-Type it declares, so
// a JSON error body that echoes a request field can never be run as a script
// or rendered as HTML.

import type { FastifyInstance } from 'fastify'

export function installBaselineHeaders (app: FastifyInstance): void {
  app.addHook('onSend', async (_request, reply, payload) => {
    reply.header('x-content-type-options', 'nosniff')
    return payload
  })
}
