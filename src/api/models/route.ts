// GET /api/v1/models and /api/v1/models/{id}: the OpenAI list shape, plus a
// `status` field so clients can tell a loading or unavailable model apart, and
// `allowed`, whether the caller's tier may use it. Every configured model is
// listed (the list is the same for everyone, as OpenAI clients expect); extra
// fields are ignored by clients that do not know them. Why a model is
// unavailable is told in short to every account; the server's inside (a path,
// the command that fixes it, the device a local model runs on and why) only to
// admin accounts, as in the log.

import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import type { FastifyRequest } from 'fastify'
import type { ModelRegistry, RegisteredModel } from '../../engine/registry.ts'
import { operatorReason, publicReason } from '../../engine/unavailable.ts'
import { ApiError } from '../../errors.ts'
import type { Limiter } from '../../limits/limiter.ts'
import { errorResponses } from '../error-schema.ts'
import { Model, ModelList, ModelParams } from './schema.ts'

export interface ModelsRouteOptions {
  models: ModelRegistry
  /** The tiers that decide `allowed`; without it every model is allowed. */
  limiter?: Pick<Limiter, 'tiers' | 'tierOf'>
}

function describe (models: ModelRegistry, model: RegisteredModel, allowed: boolean, operator: boolean): Model {
  const state = models.state(model.id)
  const described: Model = { id: model.id, object: 'model', created: model.created, owned_by: 'chatd', status: state.state, allowed }
  if (state.state === 'unavailable') described.status_reason = operator ? operatorReason(state) : publicReason(state)
  const contextLength = model.backend.contextLength
  if (contextLength !== undefined) described.context_length = contextLength
  const { device, deviceWhy, cacheOnDevice } = model.backend
  if (operator && (device === 'cpu' || device === 'cuda' || device === 'webgpu')) {
    described.device = device
    if (deviceWhy !== undefined) described.device_reason = deviceWhy
    if (cacheOnDevice !== undefined) described.cache_on_device = cacheOnDevice
  }
  return described
}

export const modelsRoute: FastifyPluginAsyncTypebox<ModelsRouteOptions> = async (app, { models, limiter }) => {
  /** Whether the caller's tier may use `id` (the chat route answers 403 model_not_allowed otherwise). */
  const allowedFor = (request: FastifyRequest): (id: string) => boolean => {
    const account = request.account
    if (!limiter || !account) return () => true
    const tier = limiter.tierOf(account)
    return id => limiter.tiers.allowsModel(tier, id)
  }

  app.get('/models', {
    config: { meteredRead: true },
    schema: {
      tags: ['models'],
      summary: 'List the models',
      security: [{ bearerAuth: [] }],
      response: { 200: ModelList, ...errorResponses },
    },
  }, async request => {
    const allowed = allowedFor(request)
    const operator = request.account?.isAdmin === true
    return { object: 'list' as const, data: models.list().map(m => describe(models, m, allowed(m.id), operator)) }
  })

  app.get('/models/:id', {
    config: { meteredRead: true },
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
    return describe(models, model, allowedFor(request)(model.id), request.account?.isAdmin === true)
  })
}
