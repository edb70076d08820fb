// GET /healthz: the process answers (liveness). GET /readyz: 200 only when no
// model is still loading (or downloading its files) and at least one model can
// answer; 503 otherwise, so a load balancer keeps traffic away from a server
// that is still loading weights or cannot serve any model at all (every one
// unavailable: files missing, download failed, variables unset). While the
// server fetches a model's files, `downloads` says how far it has got, or
// that it failed (why, with the hub's address and the command to retry, is
// in the log: neither route needs a key, so nothing of the server's inside).

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
  Type.Object({ state: Type.Literal('failed'), error: Type.String({ description: 'In short; the server log has the reason and the command to retry.' }) }),
])

const Readiness = Type.Object({
  status: Type.Enum(['ready', 'loading', 'unavailable'], { description: 'ready (200): no model is loading and at least one can answer; loading (503): a model is still loading or downloading; unavailable (503): no model can answer.' }),
  models: Type.Record(Type.String(), Type.Enum(['ready', 'loading', 'unavailable']), { description: 'Every configured model by id, with its state (GET /api/v1/models says why one is unavailable).' }),
  downloads: Type.Optional(Type.Record(Type.String(), Download, { description: 'Model files being downloaded at start, by model id; absent when there are none.' })),
})

const FAILED_DOWNLOAD = 'its files could not be downloaded; the server log says why and the command to retry'

export const healthRoutes: FastifyPluginAsyncTypebox<{ models: ModelRegistry }> = async (app, { models }) => {
  app.get('/healthz', {
    schema: { tags: ['operations'], summary: 'Liveness', response: { 200: Health } },
  }, async () => ({ status: 'ok' as const }))

  app.get('/readyz', {
    schema: { tags: ['operations'], summary: 'Readiness: 200 when no model is loading and at least one can answer, else 503', response: { 200: Readiness, 503: Readiness } },
  }, async (_request, reply) => {
    const states = Object.fromEntries(models.list().map(m => [m.id, models.state(m.id).state]))
    const status = models.readiness()
    const downloads = Object.fromEntries(Object.entries(models.downloads()).map(([id, download]) =>
      [id, download.state === 'failed' ? { state: 'failed' as const, error: FAILED_DOWNLOAD } : download]))
    return reply.code(status === 'ready' ? 200 : 503).send({ status, models: states, ...(Object.keys(downloads).length > 0 ? { downloads } : {}) })
  })
}
