// GET /metrics: Prometheus text format. No auth: bind chatd to a private
// interface or protect this path at the proxy.

import type { FastifyPluginAsync } from 'fastify'
import type { Metrics } from './metrics.ts'

export const metricsRoute: FastifyPluginAsync<{ metrics: Metrics }> = async (app, { metrics }) => {
  app.get('/metrics', { schema: { tags: ['operations'], summary: 'Prometheus metrics (text exposition format)' } }, async (_request, reply) => {
    reply.type(metrics.registry.contentType)
    return metrics.registry.metrics()
  })
}
