// POST /api/v1/messages and /api/v1/messages/count_tokens: Anthropic's Messages
// API, as Claude Code and Anthropic's SDKs call it. The body is translated into
// chatd's completion request (to-request.ts) and run by the one completion pipeline
// (keys, tiers, limits, usage rows and refusal meters as every door); the
// events are rendered as one message or as Anthropic's event stream
// (render.ts). Errors on these routes leave in Anthropic's shape (errors.ts);
// the key may come in `x-api-key`.

import type { FastifyReply, FastifyRequest } from 'fastify'
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import { estimatePromptTokens } from '../../limits/request-cost.ts'
import type { CompletionEvent } from '../pipeline/events.ts'
import { hostedSearchRounds } from '../pipeline/hosted-search.ts'
import type { InputLimits } from '../pipeline/input-limits.ts'
import type { CompletionPipeline } from '../pipeline/pipeline.ts'
import { failedWhileStreaming, streamGeneration } from '../pipeline/sse.ts'
import { readWholeReply } from '../pipeline/whole-reply.ts'
import type { StopSignal } from '../pipeline/stop-signal.ts'
import type { Metrics } from '../metrics/metrics.ts'
import type { ReasoningSeal } from '../reasoning-seal.ts'
import { anthropicErrorBody } from './errors.ts'
import { MessageBuilder, newMessageId, type StreamEvent } from './render.ts'
import { AnthropicError, AnthropicMessage, CountTokensRequest, MessagesRequest } from './schema.ts'
import { toCompletionRequest } from './to-request.ts'

export interface MessagesRouteOptions {
  /** Checks, limits, metering and generation, shared with the other doors. */
  pipeline: CompletionPipeline
  /** Seals thinking into the `signature` of thinking blocks, and opens signatures sent back. */
  reasoningSeal: ReasoningSeal
  /** MAX_CONTENT_PARTS and MAX_MESSAGE_CHARS, applied to Anthropic's blocks before translation. */
  inputLimits: InputLimits
  sseKeepAliveMs: number
}

const errorResponses = { '4xx': AnthropicError, '5xx': AnthropicError }

export const messagesRoute: FastifyPluginAsyncTypebox<MessagesRouteOptions> = async (app, { pipeline, reasoningSeal, inputLimits, sseKeepAliveMs }) => {
  // Anthropic's error shape, and the key in x-api-key as its clients send it.
  const config = { errorShape: 'anthropic' as const, xApiKey: true }

  app.post('/messages', {
    config,
    schema: {
      tags: ['messages'],
      summary: 'Create a message (Anthropic Messages API)',
      description: 'Anthropic\'s Messages API over chatd\'s models: one message, or with `stream: true` Anthropic\'s event stream. The key in `x-api-key` or `Authorization: Bearer`; `anthropic-version` and `anthropic-beta` are accepted and not needed. See docs/api.md.',
      security: [{ bearerAuth: [] }],
      body: MessagesRequest,
      response: {
        200: {
          description: 'The reply',
          content: { 'application/json': { schema: AnthropicMessage }, 'text/event-stream': { schema: { type: 'string' } } },
        },
        ...errorResponses,
      },
    },
  }, async (request, reply) => {
    const body = request.body
    const accountId = request.account!.id // bearerAuth refused a request without one
    const search = pipeline.webSearch
    // Translation (signatures opened, blocks joined) is work before the request's size is known:
    // never for a key past its limits.
    await pipeline.precheck(request, body.model)
    const translated = toCompletionRequest(body, { accountId, seal: reasoningSeal, limits: inputLimits, searchConfigured: search !== undefined })
    const hostedSearch = translated.webSearch !== undefined && search !== undefined
    const builder = new MessageBuilder({ id: newMessageId(), model: body.model, accountId, seal: reasoningSeal, thinkingDisplay: translated.thinkingDisplay, hostedSearch })
    const started = await pipeline.start(request, reply, translated.request, {
      id: builder.id,
      fields: translated.fields,
      // The model asks for searches itself; chatd runs them between rounds of the one reply.
      ...(hostedSearch ? { continueAfterCalls: hostedSearchRounds(search, { ...translated.webSearch, scope: String(accountId) }) } : {}),
    })
    if (started === undefined) return reply // the client left before generation started
    const { events, stop, model } = started
    builder.model = model.id

    if (body.stream !== true) {
      // The searches' blocks are kept in the message, as the deltas' are.
      const finish = await readWholeReply(request, started, event => { builder.delta(event) }, event => { builder.search(event) })
      if (finish === undefined) return reply // the client left: nobody to answer
      builder.finish(finish.reason, finish.usage, finish.stopSequence)
      return reply.type('application/json; charset=utf-8').send(builder.message(finish.reason, finish.usage, finish.stopSequence))
    }
    return streamMessage(request, reply, events, builder, { keepAliveMs: sseKeepAliveMs, metrics: pipeline.metrics, stop })
  })

  app.post('/messages/count_tokens', {
    config,
    schema: {
      tags: ['messages'],
      summary: 'Count a message request\'s input tokens (an estimate)',
      description: 'The same body as POST /messages without max_tokens; answers {"input_tokens"}: an estimate (the characters over the model\'s characters per token, as the tier limits estimate a prompt), computed without running the model. Counts as one of the tier\'s requests per minute (no tokens, no call of the monthly allowance).',
      security: [{ bearerAuth: [] }],
      body: CountTokensRequest,
      response: { 200: { description: 'The estimate', content: { 'application/json': { schema: { type: 'object', properties: { input_tokens: { type: 'integer' } } } } } }, ...errorResponses },
    },
  }, async (request, reply) => {
    // Generates nothing, but translating and counting a long body is work: one request of the minute.
    await pipeline.countRequest(request, reply)
    const translated = toCompletionRequest({ ...request.body, max_tokens: 1 }, { accountId: request.account!.id, seal: reasoningSeal, limits: inputLimits })
    const model = pipeline.checkInput(translated.request, translated.fields)
    // Bounded by the input limits just checked: one pass over the text, no tokenizer.
    const texts = translated.request.messages.map(m => ({
      content: m.content + (m.toolCalls ?? []).map(c => c.function.name + c.function.arguments).join(''),
    }))
    if (translated.request.tools) texts.push({ content: JSON.stringify(translated.request.tools) })
    return { input_tokens: estimatePromptTokens(texts, model.backend.charsPerToken) }
  })
}

/**
 * Streams one message as Anthropic's events (streamGeneration: a refusal before the first event
 * keeps its status and error body; a later one is an `error` event): message_start and a `ping`
 * first, then the blocks. The keep-alive is Anthropic's own `ping` event, sent while a long prompt
 * is computed or the model thinks.
 */
async function streamMessage (
  request: FastifyRequest,
  reply: FastifyReply,
  events: AsyncIterable<CompletionEvent>,
  builder: MessageBuilder,
  opts: { keepAliveMs: number; metrics: Metrics; stop: StopSignal }
): Promise<FastifyReply> {
  return streamGeneration(request, reply, events, { ...opts, keepAlive: 'event: ping\ndata: {"type":"ping"}\n\n' }, sse => {
    const send = async (events: StreamEvent[]): Promise<void> => {
      for (const event of events) await sse.event(event.type, event)
    }
    return {
      open: async () => {
        await send([builder.start(), { type: 'ping' }])
      },
      delta: event => send(builder.delta(event)),
      search: event => send(builder.search(event)),
      finish: event => send(builder.finish(event.reason, event.usage, event.stopSequence)),
      fail: async err => {
        const apiError = failedWhileStreaming(request, err, 'The reply failed while streaming.')
        opts.metrics.errors.inc({ code: apiError.code })
        await sse.event('error', anthropicErrorBody(apiError))
      },
    }
  })
}
