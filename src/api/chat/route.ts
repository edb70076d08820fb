// POST /api/v1/chat/completions. The flow (DESIGN.md section 2): schema
// validation (done by Fastify before this handler) -> size limits -> model
// lookup -> request checks (a JSON response_format's schema, or a forced tool
// call's tools' schemas, included) -> tier limits (metering.ts) -> the
// schemas' compile (local models) -> web search
// (googleSearchStatus) -> prompt shaping -> backend.generate(request, signal)
// -> JSON or SSE -> usage record.

import type { FastifyReply, FastifyRequest } from 'fastify'
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import type { GenerateEvent } from '../../engine/backend.ts'
import { withReasoningMode } from '../../engine/reasoning.ts'
import { unavailableError, type ModelRegistry, type RegisteredModel } from '../../engine/registry.ts'
import { ApiError } from '../../errors.ts'
import { drainDeadlineError } from '../drain-deadline.ts'
import { errorResponses } from '../error-schema.ts'
import type { Metrics } from '../metrics/metrics.ts'
import { Admission } from './admission.ts'
import { cacheScope } from './cache-scope.ts'
import { chunkMaker, collect, completionBody, hasLogprobs, newCompletionId, newCompletionMeta, type CompletionMeta } from './completion.ts'
import { asFieldError, checkGrammarFormats, grammarFormats } from './grammar-formats.ts'
import { checkInputLimits, type InputLimits } from './input-limits.ts'
import { checkRequest, searchFor, toGenerateRequest, type SearchDone } from './generate-request.ts'
import { admitCompletion, type ChatLimits } from './metering.ts'
import { withNextTurn } from './next-turn.ts'
import { observeGeneration } from './observe.ts'
import { ChatCompletion, ChatCompletionChunk, ChatCompletionRequest, nullMeansAbsent } from './schema.ts'
import { SSE_HEADERS, SseBody } from './sse.ts'
import { stopSignal, type StopSignal } from './stop-signal.ts'
import type { WebSearch } from '../../search/web-search.ts'

export interface ChatRouteOptions {
  models: ModelRegistry
  metrics: Metrics
  sseKeepAliveMs: number
  /** Chat completions per model that may be in progress at once (QUEUE_SIZE). */
  queueSize: number
  /** How many messages, how long each, how many parts (MAX_MESSAGES, MAX_MESSAGE_CHARS, MAX_CONTENT_PARTS). */
  inputLimits: InputLimits
  /** The web search for googleSearchStatus; absent when SEARCH_PROVIDER is not set. */
  search?: WebSearch
  /** Tier limits, checked before any work, and the usage records written when a request ends. */
  limits: ChatLimits
  /** Aborts when the shutdown's grace period is over: generations still running stop (drain-deadline.ts). */
  drainDeadline: AbortSignal
}

/** The model to answer with, or the ApiError saying why none can. */
export function resolveModel (models: ModelRegistry, id: string): RegisteredModel {
  const model = models.get(id)
  if (!model) throw new ApiError('model_not_found', `The model '${id}' does not exist. GET /api/v1/models lists the available ones.`, { param: 'model' })
  const state = models.state(id)
  if (state.state === 'loading') {
    throw new ApiError('model_unavailable', `The model '${id}' is still loading; retry shortly.`, { param: 'model', headers: { 'retry-after': '5' } })
  }
  if (state.state === 'unavailable') throw unavailableError(id, state)
  return model
}

export const chatRoute: FastifyPluginAsyncTypebox<ChatRouteOptions> = async (app, { models, metrics, sseKeepAliveMs, queueSize, inputLimits, search, limits, drainDeadline }) => {
  const admission = new Admission(queueSize)
  /** Which sampling fields each body carried as the client sent it. */
  const clientSampling = new WeakMap<object, { temperature: boolean; topP: boolean; topK: boolean }>()

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
    const startedAt = performance.now()
    const body = request.body
    checkInputLimits(body, inputLimits)
    const model = resolveModel(models, body.model)
    const toolFormat = model.backend.toolCallFormat?.()
    checkRequest(body, { searchConfigured: search !== undefined, promptsTools: toolFormat !== undefined })
    admission.assertRoom(model.id) // a full model refuses before any limit is counted or row written
    // A JSON response_format for the local engine: its schema is checked before the request counts
    // (cheap and bounded: what the grammar could not compile or, with strict, not enforce is a 400)...
    // A forced tool call's tools' arguments take the same path (grammar-formats.ts).
    const formats = model.backend.prepareResponseFormat !== undefined ? grammarFormats(body, toolFormat !== undefined) : []
    const compiles = formats.length > 0
    checkGrammarFormats(formats)
    // From here on the request counts: every way it ends writes its usage row (metering.ts).
    const completionId = newCompletionId()
    const meter = await admitCompletion(request, reply, limits, body, model, startedAt, completionId)
    const stop = stopSignal(reply, drainDeadline)
    const signal = stop.signal
    let events: AsyncIterable<GenerateEvent>
    let searched: SearchDone | undefined
    const scope = String(request.account?.id ?? '')
    try {
      // ...and compiled only now, once admitted: a compile is paid for, and a refused key compiles nothing.
      for (const { format, param } of formats) {
        try {
          await model.backend.prepareResponseFormat?.(format, { scope, signal })
        } catch (err) {
          if (stop.byShutdown()) throw drainDeadlineError()
          if (signal.aborted) return reply // the client left while its schema compiled: the compile was stopped
          throw asFieldError(err, param)
        }
      }
      if (body.googleSearchStatus && search) {
        try {
          searched = await searchFor(body, search, signal)
        } catch (err) {
          if (stop.byShutdown()) throw drainDeadlineError()
          if (signal.aborted) return reply // the client left while the search ran
          throw err
        }
      }
      const generateRequest = toGenerateRequest(body, {
        thinkingBudget: model.thinkingBudget,
        contextLength: model.backend.contextLength,
        systemPrompt: model.systemPrompt,
        search: searched,
        toolFormat,
        clientSampling: clientSampling.get(body),
      })
      generateRequest.maxTokens = meter.maxTokens(generateRequest.maxTokens)
      // The prefix cache is the account's own (and its cache_salt's): set here, from the authenticated account.
      generateRequest.cacheScope = cacheScope(request.account!.id, body.cache_salt ?? undefined) // admitCompletion refused a request without one
      if (compiles) generateRequest.grammarScope = scope // whose compiled grammars the request may use
      const release = admission.acquire(model.id)
      try {
        const shaped = withReasoningMode(model.backend.generate(generateRequest, signal), model.reasoning)
        events = meter.wrap(observeGeneration(
          // A searched reply's next turn searches again, so its start is not worth computing ahead.
          searched ? shaped : withNextTurn(shaped, model.backend, generateRequest),
          metrics, model.id, startedAt, release
        ))
      } catch (err) {
        release() // a backend whose generate() throws synchronously never starts the observer
        throw err
      }
    } catch (err) {
      await meter.fail(err)
      throw err
    }
    const meta = newCompletionMeta(model.id, model.fingerprint, searched?.results, completionId)

    if (!body.stream) {
      const done = await collect(events)
      if (done.finishReason === 'cancelled') {
        if (stop.byShutdown()) throw drainDeadlineError() // 503: the client is still there to be told
        // The client is gone; there is no one to answer.
        request.log.info({ model: model.id }, 'client disconnected; generation stopped')
        return reply
      }
      return reply.type('application/json; charset=utf-8').send(completionBody(meta, { ...done, finishReason: done.finishReason }, body.logprobs === true))
    }

    return streamCompletion(request, reply, events, meta, {
      includeUsage: body.stream_options?.include_usage === true,
      logprobs: body.logprobs === true,
      keepAliveMs: sseKeepAliveMs,
      metrics,
      stop,
    })
  })
}

/**
 * Streams one completion as SSE. The status line is held back until the
 * backend has produced its first event or refused the request, so refusals
 * (context too long, queue full) still get their own HTTP status and JSON body;
 * if the wait outlasts one keep-alive interval, the stream starts anyway (200)
 * with keep-alive comments, and a later refusal becomes an error event.
 */
async function streamCompletion (
  request: FastifyRequest,
  reply: FastifyReply,
  events: AsyncIterable<GenerateEvent>,
  meta: CompletionMeta,
  opts: { includeUsage: boolean; logprobs: boolean; keepAliveMs: number; metrics: Metrics; stop: StopSignal }
): Promise<FastifyReply> {
  const iterator = events[Symbol.asyncIterator]()
  const firstEvent = iterator.next()
  let timer: NodeJS.Timeout | undefined
  const waited = await Promise.race([
    firstEvent.then(() => 'ready' as const),
    new Promise<'slow'>(resolve => { timer = setTimeout(resolve, opts.keepAliveMs, 'slow') }),
  ]).finally(() => clearTimeout(timer))
  if (waited === 'ready') await firstEvent // rethrows a refusal into the error handler (JSON + status)

  const sse = new SseBody(opts.keepAliveMs)
  const chunks = chunkMaker(meta, opts.includeUsage, opts.logprobs)
  reply.code(200).headers(SSE_HEADERS).send(sse.stream)

  void (async () => {
    try {
      if (waited === 'slow') await sse.comment('keep-alive')
      await sse.data(chunks.role())
      let next = await firstEvent
      while (!next.done) {
        const event = next.value
        if (event.type === 'delta') {
          if (event.content || event.reasoning || event.toolCalls || hasLogprobs(event)) await sse.data(chunks.delta(event))
        } else {
          if (event.reason === 'cancelled') {
            if (opts.stop.byShutdown()) throw drainDeadlineError() // ends the stream with an error event
            break // the client has gone
          }
          await sse.data(chunks.finish(event.reason))
          if (opts.includeUsage) await sse.data(chunks.usage(event.usage))
          await sse.data('[DONE]')
          break
        }
        next = await iterator.next()
      }
    } catch (err) {
      const apiError = err instanceof ApiError ? err : new ApiError('internal_error', 'The reply failed while streaming.')
      if (!(err instanceof ApiError)) request.log.error({ err }, 'stream failed')
      opts.metrics.errors.inc({ code: apiError.code })
      await sse.data(apiError.toBody())
    } finally {
      // Closes the backend's generator (releasing the gauge and the permit) if we stopped early.
      await Promise.resolve(iterator.return?.()).catch(err => request.log.error({ err }, 'closing the generation failed'))
      sse.end()
    }
  })()
  return reply
}
