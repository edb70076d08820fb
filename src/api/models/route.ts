// GET /api/v1/models and /api/v1/models/{id}: the OpenAI list shape, plus a
// `status` field so clients can tell a loading or unavailable model apart.

import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import type { ModelRegistry, RegisteredModel } from '../../engine/registry.ts'
import { ApiError } from '../../errors.ts'
import { errorResponses } from '../error-schema.ts'
import { Model, ModelList, ModelParams } from './schema.ts'

function describe (models: ModelRegistry, model: RegisteredModel): Model {
  const state = models.state(model.id)
  const described: Model = { id: model.id, object: 'model', created: model.created, owned_by: 'chatd', status: state.state }
  if (state.state === 'unavailable') described.status_reason = state.hint ? `${state.reason} (${state.hint})` : state.reason
  const contextLength = model.backend.contextLength
  if (contextLength !== undefined) described.context_length = contextLength
  return described
}

export const modelsRoute: FastifyPluginAsyncTypebox<{ models: ModelRegistry }> = async (app, { models }) => {
  app.get('/models', {
    schema: {
      tags: ['models'],
      summary: 'List the models',
      security: [{ bearerAuth: [] }],
      response: { 200: ModelList, ...errorResponses },
    },
  }, async () => ({ object: 'list' as const, data: models.list().map(m => describe(models, m)) }))

  app.get('/models/:id', {
    schema: {
      tags: ['models'],
      summary: 'Describe one model',
      security: [{ bearerAuth: [] }],
      params: ModelParams,
      response: { 200: Model, ...errorResponses },
    },
  }, async (request) => {
    const model = models.get(request.params.id)
    if (!model) throw new ApiError('model_not_found', `The model '${request.params.id}' does not exist.`, { param: 'id' })
    return describe(models, model)
  })
}
