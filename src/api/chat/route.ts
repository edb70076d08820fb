// POST /api/v1/chat/completions: the chat-completions door. Fastify validates
// the body against the schema; to-request.ts makes it chatd's completion
// request; pipeline.ts does everything from size limits to the backend's events
// (shared with the Responses and Messages doors); this file renders those
// events as one chat.completion or as SSE chunks.

import type { FastifyReply, FastifyRequest } from 'fastify'
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import { errorResponses } from '../error-schema.ts'
import type { Metrics } from '../metrics/metrics.ts'
import { chunkMaker, CompletionCollector, completionBody, hasLogprobs } from './completion.ts'
import type { CompletionMeta } from '../pipeline/completion-meta.ts'
import type { CompletionEvent } from '../pipeline/events.ts'
import type { CompletionPipeline } from '../pipeline/pipeline.ts'
import { ChatCompletion, ChatCompletionChunk, ChatCompletionRequest, nullMeansAbsent } from './schema.ts'
import { toCompletionRequest, type SentSampling } from './to-request.ts'
import { failedWhileStreaming, streamGeneration } from '../pipeline/sse.ts'
import { readWholeReply } from '../pipeline/whole-reply.ts'
import type { StopSignal } from '../pipeline/stop-signal.ts'
import type { ResponseTimings } from '../pipeline/timings.ts'

export interface ChatRouteOptions {
  /** Checks, limits, metering and generation, shared with the other doors (pipeline.ts). */
  pipeline: CompletionPipeline
  sseKeepAliveMs: number
}

export const chatRoute: FastifyPluginAsyncTypebox<ChatRouteOptions> = async (app, { pipeline, sseKeepAliveMs }) => {
  const metrics = pipeline.metrics
  /** Which sampling fields each body carried as the client sent it. */
  const clientSampling = new WeakMap<object, SentSampling>()

  app.post('/chat/completions', {
    schema: {
      tags: ['chat'],
      summary: 'Create a chat completion',
      description: 'Returns one chat.completion object, or with `stream: true` a text/event-stream of chat.completion.chunk frames ending with `data: [DONE]`.',
      security: [{ bearerAuth: [] }],
      body: ChatCompletionRequest,
      response: {
        200: {
          description: 'The reply',
          content: {
            'application/json': { schema: ChatCompletion },
            'text/event-stream': { schema: ChatCompletionChunk },
          },
        },
        ...errorResponses,
      },
    },
    // null means absent for every optional field; dropped before validation so the defaults apply.
    preValidation: async request => {
      nullMeansAbsent(request.body)
      // Before the schema's defaults fill them in: a relay sends only what the client did.
      const body = request.body as Record<string, unknown> | null
      if (typeof body === 'object' && body !== null) {
        clientSampling.set(body, { temperature: body.temperature !== undefined, topP: body.top_p !== undefined, topK: body.top_k !== undefined })
      }
    },
  }, async (request, reply) => {
    const body = request.body
    const translated = toCompletionRequest(body, { sent: clientSampling.get(body), limits: pipeline.inputLimits })
    const started = await pipeline.start(request, reply, translated.request, { fields: translated.fields })
    if (started === undefined) return reply // the client left before generation started
    const { events, meta, stop } = started

    if (!body.stream) {
      const collector = new CompletionCollector()
      const finish = await readWholeReply(request, started, event => collector.add(event))
      if (finish === undefined) return reply // the client left: nobody to answer
      const completion = completionBody(meta, collector.completed(finish), body.logprobs === true)
      return reply.type('application/json; charset=utf-8').send(started.watch.wantsTimings ? { ...completion, timings: started.watch.timings() } : completion)
    }

    return streamCompletion(request, reply, events, meta, {
      includeUsage: body.stream_options?.include_usage === true,
      logprobs: body.logprobs === true,
      keepAliveMs: sseKeepAliveMs,
      metrics,
      stop,
      timings: started.watch.wantsTimings ? () => started.watch.timings() : undefined,
    })
  })
}

/**
 * Streams one completion as chat.completion.chunk frames (streamGeneration: a refusal before the
 * first event keeps its own HTTP status and JSON body; a later one is an error frame), ending
 * with `data: [DONE]`.
 */
async function streamCompletion (
  request: FastifyRequest,
  reply: FastifyReply,
  events: AsyncIterable<CompletionEvent>,
  meta: CompletionMeta,
  opts: { includeUsage: boolean; logprobs: boolean; keepAliveMs: number; metrics: Metrics; stop: StopSignal; timings?: () => ResponseTimings | undefined }
): Promise<FastifyReply> {
  const chunks = chunkMaker(meta, opts.includeUsage, opts.logprobs)
  return streamGeneration(request, reply, events, opts, sse => ({
    open: async slow => {
      if (slow) await sse.comment('keep-alive')
      await sse.data(chunks.role())
    },
    delta: async event => {
      if (event.content || event.reasoning || event.toolCalls || hasLogprobs(event)) await sse.data(chunks.delta(event))
    },
    finish: async event => {
      const timings = opts.timings?.()
      await sse.data(timings ? { ...chunks.finish(event.reason), timings } : chunks.finish(event.reason))
      if (opts.includeUsage) await sse.data(chunks.usage(event.usage))
      await sse.data('[DONE]')
    },
    fail: async err => {
      const apiError = failedWhileStreaming(request, err, 'The reply failed while streaming.')
      opts.metrics.errors.inc({ code: apiError.code })
      await sse.data(apiError.toBody())
    },
  }))
}
