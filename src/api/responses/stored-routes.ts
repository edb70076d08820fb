// GET /responses/{id}, DELETE /responses/{id} and GET /responses/{id}/input_items:
// the account's stored responses, as OpenAI's Responses API serves them.
// A read counts as one of the tier's requests per minute (no tokens, no call of
// the allowance), and a page of input items parses only what it shows; another
// account's id is 404 like an unknown one.

import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import type { FastifyReply, FastifyRequest } from 'fastify'
import { Type } from 'typebox'
import { ApiError, invalidParam } from '../../errors.ts'
import type { ConversationItem, StoredResponses } from '../../responses/stored-responses.ts'
import { errorResponses } from '../error-schema.ts'

const ResponseParams = Type.Object({
  response_id: Type.String({ description: 'resp_…' }),
})

/** Query values arrive as strings (the API never coerces); each is checked in the handler so its error names it. */
const Include = Type.Optional(Type.Union([Type.String(), Type.Array(Type.String())], { description: 'Accepted; items are returned as stored.' }))

const RetrieveQuery = Type.Object({
  include: Include,
  stream: Type.Optional(Type.String({ description: 'Only `false`: a stored response is not replayed as a stream.' })),
})

const ListQuery = Type.Object({
  limit: Type.Optional(Type.String({ description: 'Items per page, 1 to 100 (default 20).' })),
  order: Type.Optional(Type.String({ description: '`asc` (oldest first) or `desc` (newest first, the default).' })),
  after: Type.Optional(Type.String({ description: 'An item id: the page starts after it.' })),
  include: Include,
})

const AnyObject = Type.Object({}, { additionalProperties: true })

const Deleted = Type.Object({
  id: Type.String(),
  object: Type.Literal('response.deleted'),
  deleted: Type.Literal(true),
})

const ItemList = Type.Object({
  object: Type.Literal('list'),
  data: Type.Array(AnyObject),
  first_id: Type.Union([Type.String(), Type.Null()]),
  last_id: Type.Union([Type.String(), Type.Null()]),
  has_more: Type.Boolean(),
})

const DEFAULT_LIMIT = 20
const MAX_LIMIT = 100

function notFound (id: string): ApiError {
  // The id is echoed shortened: it is the caller's own text, but a log line need not carry a long one.
  const shown = id.length > 80 ? `${id.slice(0, 80)}…` : id
  return new ApiError('not_found', `No stored response with id '${shown}'.`, { param: 'response_id' })
}

function parseLimit (value: string | undefined): number {
  if (value === undefined) return DEFAULT_LIMIT
  const limit = /^[0-9]{1,3}$/.test(value) ? Number(value) : NaN
  if (!(limit >= 1 && limit <= MAX_LIMIT)) throw invalidParam('limit', `Invalid value for 'limit': must be an integer from 1 to ${MAX_LIMIT}.`)
  return limit
}

function parseOrder (value: string | undefined): 'asc' | 'desc' {
  if (value === undefined) return 'desc'
  if (value !== 'asc' && value !== 'desc') throw invalidParam('order', 'Invalid value for \'order\': must be "asc" or "desc".')
  return value
}

function itemId (item: ConversationItem): string | null {
  return typeof item.id === 'string' ? item.id : null
}

export interface StoredRoutesOptions {
  stored: StoredResponses
  /** Counts the read as one of the tier's requests per minute (pipeline.countRequest), before its work. */
  countRequest: (request: FastifyRequest, reply: FastifyReply) => Promise<void>
}

export const storedResponsesRoutes: FastifyPluginAsyncTypebox<StoredRoutesOptions> = async (app, { stored, countRequest }) => {
  app.get('/responses/:response_id', {
    schema: {
      tags: ['responses'],
      summary: 'A stored response, exactly as it was returned',
      security: [{ bearerAuth: [] }],
      params: ResponseParams,
      querystring: RetrieveQuery,
      // Sent as the stored JSON text; the schema only documents it.
      response: { 200: Type.Unknown({ description: 'The response object as it was returned by POST /responses.' }), ...errorResponses },
    },
  }, async (request, reply) => {
    const { stream } = request.query
    if (stream !== undefined && stream !== 'false') {
      throw invalidParam('stream', 'Invalid value for \'stream\': a stored response cannot be replayed as a stream; leave stream out or set it to false.')
    }
    await countRequest(request, reply)
    const json = await stored.get(request.account!.id, request.params.response_id)
    if (json === undefined) throw notFound(request.params.response_id)
    // The stored text itself: the same bytes' worth of JSON the client was first sent, nothing re-serialized.
    return reply.type('application/json; charset=utf-8').send(json)
  })

  app.delete('/responses/:response_id', {
    config: { meteredRead: true },
    schema: {
      tags: ['responses'],
      summary: 'Delete a stored response; conversations through it can no longer be continued',
      security: [{ bearerAuth: [] }],
      params: ResponseParams,
      response: { 200: Deleted, ...errorResponses },
    },
  }, async request => {
    const id = request.params.response_id
    if (!await stored.delete(request.account!.id, id)) throw notFound(id)
    return { id, object: 'response.deleted' as const, deleted: true as const }
  })

  app.get('/responses/:response_id/input_items', {
    schema: {
      tags: ['responses'],
      summary: 'The items the model saw for a stored response: earlier turns\' input and output, then its own input',
      security: [{ bearerAuth: [] }],
      params: ResponseParams,
      querystring: ListQuery,
      response: { 200: ItemList, ...errorResponses },
    },
  }, async (request, reply) => {
    const limit = parseLimit(request.query.limit)
    const order = parseOrder(request.query.order)
    const { after } = request.query
    await countRequest(request, reply)
    const page = await stored.inputItemsPage(request.account!.id, request.params.response_id, { order, after, limit })
    if (page === undefined) throw notFound(request.params.response_id)
    if (page === 'after-not-found') throw invalidParam('after', `Invalid value for 'after': no item with id '${after!.slice(0, 80)}' in this response's input items.`)
    const { data } = page
    return {
      object: 'list' as const,
      data,
      first_id: data.length > 0 ? itemId(data[0]) : null,
      last_id: data.length > 0 ? itemId(data[data.length - 1]) : null,
      has_more: page.hasMore,
    }
  })
}
