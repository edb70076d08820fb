// What one completion shows the operator, from the one place every door's
// request passes through (pipeline.ts): the metrics (chatd's own, vLLM's
// serving families, the GenAI histograms, the per-account figures) and, with
// tracing on, the model span "chat {model}" with its children (limits,
// search, queue/prefill/decode or the upstream call, the usage write).
//
// `events` counts the generation as its events pass: the active-requests
// gauge for its whole life, the queue-length gauge until its first event,
// time to first token and between outputs, tokens, and how it finished. The
// gauges (and `release`, the admission permit) are let go in `finally`, so a
// request that ends by error, by disconnect or by the consumer stopping early
// never stays counted. `call` wraps each call of the backend (a request in
// rounds makes several): the engine's or the upstream's own times. `refused`
// counts a request refused before its generation; `written` closes the model
// span once its usage row is written.

import type { FastifyReply, FastifyRequest } from 'fastify'
import { SpanKind, trace, type Context, type Span } from '@opentelemetry/api'
import { wallClock, type ChatMessage, type FinishReason, type GenerateEvent, type GenerateRequest, type GenerateTimings, type Usage } from '../../engine/backend.ts'
import type { ModelRegistry, RegisteredModel } from '../../engine/registry.ts'
import { ApiError } from '../../errors.ts'
import type { UsageStatus } from '../../store/schema.ts'
import { GenAiMetrics, GEN_AI_OPERATION, GEN_AI_PROVIDER } from '../metrics/gen-ai.ts'
import type { Metrics } from '../metrics/metrics.ts'
import type { FinishedReason } from '../metrics/serving.ts'
import { endFailed, endFailedWith } from '../tracing/hooks.ts'
import { CONTENT_LIMIT, type Tracing } from '../tracing/tracing.ts'
import type { CompletionEvent } from './events.ts'
import { DEFAULTS, type CompletionRequest } from './request.ts'
import { responseTimings, serverTiming, timingsRequested, type ResponseTimings } from './timings.ts'

export interface WatchOptions {
  metrics: Metrics
  models: ModelRegistry
  /** Absent: tracing is off. */
  tracing?: Tracing
  /** performance.now() when the pipeline took the request. */
  startedAt: number
}

/** An error's code, for labels and spans (never its message, which may echo input). */
function codeOf (err: unknown): string {
  return err instanceof ApiError ? err.code : 'internal_error'
}

/** An error the server answers as a refusal of the request (a 4xx, or a full queue), not as a failure. */
function isRefusal (err: unknown): boolean {
  return err instanceof ApiError && (err.status < 500 || err.code === 'server_overloaded')
}

/**
 * A conversation as the GenAI conventions write gen_ai.input.messages, cut at CONTENT_LIMIT: the
 * newest messages kept, each text cut first, so a long conversation costs no more than the limit.
 */
function messagesAttribute (messages: ChatMessage[]): string {
  const kept: unknown[] = []
  let size = 0
  for (let i = messages.length - 1; i >= 0; i--) {
    // What is left of the limit for this message's text, its structure aside.
    const room = CONTENT_LIMIT - size - 256
    if (room <= 0) break
    const m = messages[i]
    const message = {
      role: m.role,
      parts: [
        ...(m.content !== '' ? [{ type: 'text', content: m.content.slice(0, room) }] : []),
        ...(m.toolCalls ?? []).map(c => ({ type: 'tool_call', id: c.id, name: c.function.name.slice(0, 256), arguments: c.function.arguments.slice(0, room) })),
        ...(m.toolCallId !== undefined ? [{ type: 'tool_call_response', id: m.toolCallId.slice(0, 256) }] : []),
      ],
    }
    size += JSON.stringify(message).length
    kept.unshift(message)
  }
  return JSON.stringify(kept)
}

export class RequestWatch {
  readonly #metrics: Metrics
  readonly #models: ModelRegistry
  readonly #tracing: Tracing | undefined
  readonly #request: FastifyRequest
  readonly #reply: FastifyReply
  readonly #startedAt: number
  /** The request's arrival on the wall clock (the engine's times are on it too). */
  readonly arrivedAt: number
  /** The client asked for its timings (X-Chatd-Timings). */
  readonly wantsTimings: boolean
  #model: RegisteredModel | undefined
  #span: Span | undefined
  #context: Context | undefined
  #spanEnded = false
  #firstOutputAt: number | undefined
  #lastOutputAt: number | undefined
  #endedAt: number | undefined
  #usage: Usage | undefined
  #backend: GenerateTimings | undefined
  #output = ''
  #inputCaptured = false

  /** Throws the 400 for a malformed X-Chatd-Timings header, before any work. */
  constructor (request: FastifyRequest, reply: FastifyReply, opts: WatchOptions) {
    this.#metrics = opts.metrics
    this.#models = opts.models
    this.#tracing = opts.tracing
    this.#request = request
    this.#reply = reply
    this.#startedAt = opts.startedAt
    this.arrivedAt = wallClock() - (performance.now() - opts.startedAt)
    this.wantsTimings = timingsRequested(request)
  }

  /** The model is known: the model span starts (with tracing on and the request traced). */
  model (model: RegisteredModel, body: CompletionRequest, completionId: string): void {
    this.#model = model
    const parent = this.#request.trace
    if (!this.#tracing || !parent) return
    const maxTokens = body.maxTokens
    this.#span = this.#tracing.tracer.startSpan(`${GEN_AI_OPERATION} ${model.id}`, {
      kind: SpanKind.INTERNAL,
      attributes: {
        'gen_ai.operation.name': GEN_AI_OPERATION,
        'gen_ai.provider.name': GEN_AI_PROVIDER,
        'gen_ai.request.model': body.model,
        'gen_ai.response.id': completionId,
        ...(typeof maxTokens === 'number' ? { 'gen_ai.request.max_tokens': maxTokens } : {}),
        // The sampling the model runs with: the client's, or the defaults.
        'gen_ai.request.temperature': body.temperature ?? DEFAULTS.temperature,
        'gen_ai.request.top_p': body.topP ?? DEFAULTS.top_p,
        ...(typeof body.seed === 'number' ? { 'gen_ai.request.seed': body.seed } : {}),
        ...(typeof body.frequencyPenalty === 'number' ? { 'gen_ai.request.frequency_penalty': body.frequencyPenalty } : {}),
        ...(typeof body.presencePenalty === 'number' ? { 'gen_ai.request.presence_penalty': body.presencePenalty } : {}),
        'gen_ai.request.stream': body.stream === true,
        ...(this.#request.account ? { 'chatd.account.id': this.#request.account.id } : {}),
      },
    }, parent.context)
    this.#context = trace.setSpan(parent.context, this.#span)
  }

  /** `work` in a child span of the model span named `name` (limits, search...), when traced. */
  async phase<T> (name: string, work: () => Promise<T>): Promise<T> {
    if (!this.#tracing || !this.#context) return work()
    const span = this.#tracing.tracer.startSpan(name, {}, this.#context)
    let result: T
    try {
      result = await work()
    } catch (err) {
      endFailed(span, err)
      throw err
    }
    span.end()
    return result
  }

  /** A generator's run in a child span named `name` (a hosted search round, whose events go out as it runs), when traced. */
  async * phaseOf<T, R> (name: string, work: AsyncGenerator<T, R>): AsyncGenerator<T, R> {
    if (!this.#tracing || !this.#context) return yield * work
    const span = this.#tracing.tracer.startSpan(name, {}, this.#context)
    let ended = false
    try {
      const result = yield * work
      span.end()
      ended = true
      return result
    } catch (err) {
      endFailed(span, err)
      ended = true
      throw err
    } finally {
      if (!ended) span.end() // the reply's reader stopped in the middle (the client left)
    }
  }

  /** The request was refused before its generation started (by its limits, its checks, a full queue). */
  refused (err: unknown, requested: string): void {
    const model = this.#model?.id ?? this.#models.get(requested)?.id
    // A model id nobody configured is never a label value: it is the client's text.
    if (model === undefined) return
    this.#rejected(model, codeOf(err))
    this.#endSpan(codeOf(err))
  }

  #rejected (model: string, reason: string): void {
    this.#metrics.serving.admissionRejections.inc({ model_name: model, reason })
    this.#metrics.genAi.requestDuration.observe({ ...GenAiMetrics.labels(model), error_type: reason }, (performance.now() - this.#startedAt) / 1000)
    if (this.#request.account) this.#metrics.accounts?.refused(this.#request.account.id, model, reason)
  }

  /**
   * One call of the backend (a request in rounds makes several): an upstream call gets a client
   * span whose trace context the backend sends on; a local engine's queue, prompt and generation
   * become spans and histograms from its own times when the call ends.
   */
  async * call (request: GenerateRequest, run: (request: GenerateRequest) => AsyncIterable<GenerateEvent>): AsyncIterable<GenerateEvent> {
    const model = this.#model!
    const local = model.backend.activeSequences !== undefined
    const tracing = this.#tracing
    let span: Span | undefined
    if (tracing && this.#context) {
      if (!local) {
        span = tracing.tracer.startSpan(`upstream ${model.id}`, { kind: SpanKind.CLIENT }, this.#context)
        request.traceContext = tracing.inject(trace.setSpan(this.#context, span))
      }
      if (tracing.captureContent && !this.#inputCaptured) {
        this.#inputCaptured = true
        this.#span?.setAttribute('gen_ai.input.messages', messagesAttribute(request.messages))
      }
    }
    let finish: Extract<GenerateEvent, { type: 'finish' }> | undefined
    try {
      for await (const event of run(request)) {
        if (event.type === 'finish') {
          finish = event
          // Before the finish goes on: the request's timings (observe's #finished) read them.
          if (event.timings) this.#timed(event.timings, event.usage, local)
        }
        yield event
      }
    } catch (err) {
      if (span) endFailed(span, err)
      span = undefined
      throw err
    } finally {
      if (span) {
        if (finish?.timings?.respondedAt !== undefined) span.addEvent('response', finish.timings.respondedAt)
        if (!finish) span.setAttribute('chatd.cancelled', true)
        span.end()
      }
    }
  }

  /** The generation's events, counted (see the top of the file); `release` gives the admission permit back. */
  async * events (events: AsyncIterable<CompletionEvent>, release?: () => void): AsyncIterable<CompletionEvent> {
    const metrics = this.#metrics
    const model = this.#model!.id
    const labels = { model }
    const served = { model_name: model }
    metrics.activeRequests.inc(labels)
    metrics.queueLength.inc(labels)
    metrics.serving.inFlight(model, 1)
    let waiting = true
    let finished = false
    let failure: unknown
    try {
      for await (const event of events) {
        if (waiting) {
          waiting = false
          metrics.queueLength.dec(labels)
        }
        if (event.type === 'delta') {
          if (event.content || event.reasoning || event.toolCalls) {
            const now = wallClock()
            if (this.#firstOutputAt === undefined) {
              this.#firstOutputAt = now
              metrics.timeToFirstToken.observe(labels, (performance.now() - this.#startedAt) / 1000)
              metrics.serving.timeToFirstToken.observe(served, (now - this.arrivedAt) / 1000)
            } else {
              metrics.serving.interTokenLatency.observe(served, (now - this.#lastOutputAt!) / 1000)
            }
            this.#lastOutputAt = now
            if (this.#tracing?.captureContent && this.#output.length < CONTENT_LIMIT) this.#output += event.content ?? ''
          }
        } else if (event.type === 'finish') {
          finished = true
          this.#finished(event.reason, event.usage)
        }
        yield event
      }
    } catch (err) {
      failure = err
      throw err
    } finally {
      if (waiting) metrics.queueLength.dec(labels)
      metrics.activeRequests.dec(labels)
      metrics.serving.inFlight(model, -1)
      release?.()
      // A refusal from the model before anything came (a prompt past the context, a busy grammar
      // service) is a rejection, as a full queue is; anything else that fails is an error.
      if (failure !== undefined && waiting && isRefusal(failure)) this.#rejected(model, codeOf(failure))
      else if (failure !== undefined) this.#failed(failure)
      // No finish and no error: the consumer stopped reading (the client went away).
      else if (!finished) metrics.serving.requestSuccess.inc({ ...served, finished_reason: 'abort' })
    }
  }

  /** The request's usage row is being written (`work`): per-account figures, and the model span ends after it. */
  async written (ending: { status: UsageStatus; usage?: Usage; errorCode?: string | null }, work: () => Promise<void>): Promise<void> {
    const model = this.#model
    if (model && this.#request.account) this.#metrics.accounts?.ended(this.#request.account.id, model.id, ending.status, ending.usage)
    try {
      await this.phase('usage write', work)
    } finally {
      this.#endSpan(ending.status === 'failed' ? ending.errorCode ?? 'internal_error' : undefined)
    }
  }

  /** The response's timings (X-Chatd-Timings), once the generation has finished. */
  timings (): ResponseTimings | undefined {
    if (this.#endedAt === undefined || this.#usage === undefined) return undefined
    return responseTimings({
      arrivedAt: this.arrivedAt,
      firstOutputAt: this.#firstOutputAt,
      lastOutputAt: this.#lastOutputAt,
      endedAt: this.#endedAt,
      backend: this.#backend,
      usage: this.#usage,
    })
  }

  #finished (reason: FinishReason, usage: Usage): void {
    const metrics = this.#metrics
    const model = this.#model!.id
    const labels = { model }
    const served = { model_name: model }
    metrics.generatedTokens.inc(labels, usage.completion_tokens)
    metrics.promptTokens.inc(labels, usage.prompt_tokens)
    metrics.cachedPromptTokens.inc(labels, usage.prompt_tokens_details?.cached_tokens ?? 0)
    metrics.completions.inc({ model, finish_reason: reason })

    const now = wallClock()
    this.#endedAt = now
    this.#usage = usage
    const finishedReason: FinishedReason = reason === 'cancelled' ? 'abort' : reason
    const seconds = (now - this.arrivedAt) / 1000
    metrics.serving.requestSuccess.inc({ ...served, finished_reason: finishedReason })
    metrics.serving.promptTokens.inc(served, usage.prompt_tokens)
    metrics.serving.generationTokens.inc(served, usage.completion_tokens)
    metrics.serving.requestPromptTokens.observe(served, usage.prompt_tokens)
    metrics.serving.requestGenerationTokens.observe(served, usage.completion_tokens)
    metrics.serving.e2eLatency.observe(served, seconds)
    const genAi = GenAiMetrics.labels(model)
    metrics.genAi.requestDuration.observe(genAi, seconds)
    const first = this.#firstOutputAt
    const perToken = first !== undefined && usage.completion_tokens > 1 ? (this.#lastOutputAt! - first) / (usage.completion_tokens - 1) / 1000 : undefined
    if (perToken !== undefined) metrics.serving.requestTimePerOutputToken.observe(served, perToken)
    if (reason !== 'cancelled') {
      if (first !== undefined) metrics.genAi.timeToFirstToken.observe(genAi, (first - this.arrivedAt) / 1000)
      if (perToken !== undefined) metrics.genAi.timePerOutputToken.observe(genAi, perToken)
    }

    if (this.wantsTimings && !this.#reply.raw.headersSent) this.#reply.header('server-timing', serverTiming(this.timings()!))

    const span = this.#span
    if (span && !this.#spanEnded) {
      span.setAttributes({
        'gen_ai.response.model': model,
        'gen_ai.response.finish_reasons': [reason],
        'gen_ai.usage.input_tokens': usage.prompt_tokens,
        'gen_ai.usage.output_tokens': usage.completion_tokens,
        'gen_ai.usage.cache_read.input_tokens': usage.prompt_tokens_details?.cached_tokens ?? 0,
        ...(first !== undefined ? { 'gen_ai.server.time_to_first_token': (first - this.arrivedAt) / 1000 } : {}),
      })
      if (this.#tracing?.captureContent) {
        span.setAttribute('gen_ai.output.messages', JSON.stringify([{ role: 'assistant', parts: [{ type: 'text', content: this.#output.slice(0, CONTENT_LIMIT) }], finish_reason: reason }]))
      }
    }
  }

  #failed (err: unknown): void {
    const model = this.#model!.id
    const code = codeOf(err)
    this.#metrics.serving.requestSuccess.inc({ model_name: model, finished_reason: 'error' })
    this.#metrics.genAi.requestDuration.observe({ ...GenAiMetrics.labels(model), error_type: code }, (wallClock() - this.arrivedAt) / 1000)
    this.#span?.setAttribute('error.type', code)
  }

  /** One backend call's own times: histograms, and for a local engine its queue, prompt and decode spans. */
  #timed (t: GenerateTimings, usage: Usage, local: boolean): void {
    this.#backend = t
    const served = { model_name: this.#model!.id }
    const serving = this.#metrics.serving
    const seconds = (from: number | undefined, to: number | undefined): number | undefined => from !== undefined && to !== undefined ? Math.max(0, to - from) / 1000 : undefined
    const queue = seconds(t.queuedAt, t.scheduledAt)
    const prefill = seconds(t.scheduledAt, t.firstTokenAt)
    const decode = seconds(t.firstTokenAt, t.lastTokenAt)
    const inference = seconds(t.scheduledAt, t.lastTokenAt)
    const upstream = seconds(t.sentAt, t.respondedAt)
    if (queue !== undefined) serving.queueTime.observe(served, queue)
    if (prefill !== undefined) serving.prefillTime.observe(served, prefill)
    if (decode !== undefined) serving.decodeTime.observe(served, decode)
    if (inference !== undefined) serving.inferenceTime.observe(served, inference)
    if (upstream !== undefined) serving.upstreamResponse.observe(served, upstream)
    if (!local || !this.#tracing || !this.#context) return
    const span = (name: string, from: number | undefined, to: number | undefined, attributes: Record<string, number> = {}): void => {
      if (from === undefined || to === undefined) return
      this.#tracing!.tracer.startSpan(name, { startTime: from, attributes }, this.#context).end(to)
    }
    span('queue', t.queuedAt, t.scheduledAt)
    span('prefill', t.scheduledAt, t.firstTokenAt, { 'gen_ai.usage.input_tokens': usage.prompt_tokens, 'gen_ai.usage.cache_read.input_tokens': usage.prompt_tokens_details?.cached_tokens ?? 0 })
    span('decode', t.firstTokenAt, t.lastTokenAt, { 'gen_ai.usage.output_tokens': usage.completion_tokens })
  }

  /** Ends the model span once: failed with `errorCode`, or not. */
  #endSpan (errorCode?: string): void {
    const span = this.#span
    if (!span || this.#spanEnded) return
    this.#spanEnded = true
    if (errorCode !== undefined) endFailedWith(span, errorCode)
    else span.end()
  }
}
