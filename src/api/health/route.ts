// GET /healthz: the process answers (liveness). GET /readyz: every model that
// can be used has loaded (readiness); 503 until then, so a load balancer keeps
// traffic away from a server still loading (or downloading) weights; while the
// server fetches a model's files, `downloads` says how far it has got.
// Neither needs a key.

import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import { Type } from 'typebox'
import type { ModelRegistry } from '../../engine/registry.ts'

const Health = Type.Object({ status: Type.Literal('ok') })

/** A model's files being fetched by the server at start (CHATD_AUTO_PULL), or why that failed. */
const Download = Type.Union([
  Type.Object({
    state: Type.Literal('downloading'),
    file: Type.Optional(Type.String()),
    downloadedBytes: Type.Integer(),
    totalBytes: Type.Integer(),
    percent: Type.Number(),
    bytesPerSecond: Type.Integer(),
    etaSeconds: Type.Optional(Type.Integer()),
  }),
  Type.Object({ state: Type.Literal('failed'), error: Type.String(), hint: Type.String() }),
])

const Readiness = Type.Object({
  status: Type.Enum(['ready', 'loading']),
  models: Type.Record(Type.String(), Type.Enum(['ready', 'loading', 'unavailable'])),
  downloads: Type.Optional(Type.Record(Type.String(), Download, { description: 'Model files being downloaded at start, by model id; absent when there are none.' })),
})

export const healthRoutes: FastifyPluginAsyncTypebox<{ models: ModelRegistry }> = async (app, { models }) => {
  app.get('/healthz', {
    schema: { tags: ['operations'], summary: 'Liveness', response: { 200: Health } },
  }, async () => ({ status: 'ok' as const }))

  app.get('/readyz', {
    schema: { tags: ['operations'], summary: 'Readiness: 503 until every usable model has loaded', response: { 200: Readiness, 503: Readiness } },
  }, async (_request, reply) => {
    const states = Object.fromEntries(models.list().map(m => [m.id, models.state(m.id).state]))
    const ready = models.ready()
    const downloads = models.downloads()
    return reply.code(ready ? 200 : 503).send({ status: ready ? 'ready' : 'loading', models: states, ...(Object.keys(downloads).length > 0 ? { downloads } : {}) })
  })
}
