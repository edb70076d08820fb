// GET /metrics: Prometheus text format. Open by default; METRICS_TOKEN makes
// it require `Authorization: Bearer <token>` (compared as SHA-256 digests in
// constant time), and METRICS_PORT moves it to a listener of its own
// (`metricsListener`), so the API port can face the internet while metrics
// stay on a private interface.

import { createHash, timingSafeEqual } from 'node:crypto'
import Fastify, { type FastifyInstance, type FastifyPluginAsync, type FastifyServerOptions } from 'fastify'
import { ApiError } from '../../errors.ts'
import { installErrorHandling } from '../error-handler.ts'
import type { Metrics } from './metrics.ts'

export interface MetricsRouteOptions {
  metrics: Metrics
  /** METRICS_TOKEN: the bearer token a scrape must send; absent: open. */
  token?: string
}

const CHALLENGE = { 'www-authenticate': 'Bearer realm="metrics"' }

function digest (text: string): Buffer {
  return createHash('sha256').update(text).digest()
}

/** Refuses a scrape without the token (401), before any metric is gathered. */
function tokenCheck (token: string): (authorization: string | undefined) => void {
  const expected = digest(token)
  return authorization => {
    const match = /^\s*Bearer\s+(\S+)\s*$/i.exec(authorization ?? '')
    if (!match) throw new ApiError('missing_api_key', 'GET /metrics needs "Authorization: Bearer <METRICS_TOKEN>".', { headers: CHALLENGE })
    if (!timingSafeEqual(digest(match[1]), expected)) throw new ApiError('invalid_api_key', 'Wrong metrics token.', { headers: CHALLENGE })
  }
}

export const metricsRoute: FastifyPluginAsync<MetricsRouteOptions> = async (app, { metrics, token }) => {
  const check = token === undefined ? undefined : tokenCheck(token)
  app.get('/metrics', {
    schema: { tags: ['operations'], summary: 'Prometheus metrics (text exposition format); with METRICS_TOKEN, behind a bearer token' },
    onRequest: async request => { check?.(request.headers.authorization) },
  }, async (_request, reply) => {
    reply.type(metrics.registry.contentType)
    return metrics.registry.metrics()
  })
}

/** /metrics alone on a listener of its own (METRICS_PORT); every other path is 404. Close it with the app. */
export async function metricsListener (metrics: Metrics, opts: { host: string; port: number; token?: string; logger?: FastifyServerOptions['logger'] }): Promise<FastifyInstance> {
  const app = Fastify({ logger: opts.logger ?? false })
  installErrorHandling(app, metrics)
  await app.register(metricsRoute, { metrics, token: opts.token })
  await app.listen({ host: opts.host, port: opts.port })
  return app
}
