// The one way a completion starts, whichever door it came in by (chat
// completions, the Responses API, the Messages API: docs/design.md "three wire
// formats, one house"). A front door translates its body into chatd's own
// CompletionRequest (request.ts) and calls `start` with its table of field
// names (fields.ts); what comes back is the stream of GenerateEvents to render
// in its own shape, every error named in the door's terms. Everything between
// lives here once: size limits -> the request's bounds -> model lookup ->
// request checks (a JSON
// response_format's schema, or a forced tool call's tools' schemas, included)
// -> tier limits (metering.ts) -> the schemas' compile (local models) -> web
// search (googleSearchStatus) -> prompt shaping -> backend.generate(request,
// signal), with the metrics, the admission permit and the usage row wrapped
// around the events.

import type { FastifyReply, FastifyRequest } from 'fastify'
import { FormatCompileError, type GenerateEvent, type GenerateRequest } from '../../engine/backend.ts'
import { withReasoningMode } from '../../engine/reasoning.ts'
import { unavailableError, type ModelRegistry, type RegisteredModel } from '../../engine/registry.ts'
import { ApiError } from '../../errors.ts'
import type { WebSearch } from '../../search/web-search.ts'
import { drainDeadlineError } from '../drain-deadline.ts'
import type { Metrics } from '../metrics/metrics.ts'
import type { Tracing } from '../tracing/tracing.ts'
import { Admission } from './admission.ts'
import { cacheScope } from './cache-scope.ts'
import { newCompletionId, newCompletionMeta, type CompletionMeta } from './completion-meta.ts'
import { checkInputLimits, type InputLimits } from './input-limits.ts'
import { checkRequest, searchFor, toGenerateRequest, type SearchDone } from './generate-request.ts'
import { atField, checkGrammarFormats, grammarFormats } from './grammar-formats.ts'
import { PromptHistory } from '../../limits/prompt-history.ts'
import { admitCompletion, roundPromptEstimate, type ChatLimits } from './metering.ts'
import { withNextTurn } from './next-turn.ts'
import { RequestWatch } from './observe.ts'
import { withRounds, type ContinueAfterCalls } from './rounds.ts'
import { stopSignal, type StopSignal } from './stop-signal.ts'
import type { CompletionEvent } from './events.ts'
import { fieldNames, inDoorTerms, neutralNames, type FieldNames, type FieldTable } from './fields.ts'
import { checkCompletionRequest, type CompletionRequest } from './request.ts'

export interface PipelineOptions {
  models: ModelRegistry
  metrics: Metrics
  /** Completions per model that may be in progress at once (QUEUE_SIZE), over every door. */
  queueSize: number
  /** How many messages, how long each, how many parts (MAX_MESSAGES, MAX_MESSAGE_CHARS, MAX_CONTENT_PARTS). */
  inputLimits: InputLimits
  /** The web search for googleSearchStatus; absent when SEARCH_PROVIDER is not set. */
  search?: WebSearch
  /** Tier limits, checked before any work, and the usage records written when a request ends. */
  limits: ChatLimits
  /** Aborts when the shutdown's grace period is over: generations still running stop (drain-deadline.ts). */
  drainDeadline: AbortSignal
  /** Traces to export; absent when tracing is off. */
  tracing?: Tracing
}

export interface StartOptions {
  /** The id the response will carry (and the usage row); a chat completion id when absent. */
  id?: string
  /** Tool calls the door runs itself: the reply goes on after them, in the same admission and usage row (rounds.ts). */
  continueAfterCalls?: ContinueAfterCalls
  /**
   * The door's names for the request's fields (fields.ts): every error start() throws, and every
   * error the events throw, names the door's field. Absent: the neutral names.
   */
  fields?: FieldTable
}

export interface StartedCompletion {
  model: RegisteredModel
  /** The generation's events (a hosted search's among them), metered, observed and holding the admission permit until they end. */
  events: AsyncIterable<CompletionEvent>
  meta: CompletionMeta
  stop: StopSignal
  /** The request's metrics and trace (observe.ts): its timings, once the generation has finished. */
  watch: RequestWatch
}

function modelNotFound (id: string): ApiError {
  return new ApiError('model_not_found', `The model '${id}' does not exist. GET /api/v1/models lists the available ones.`, { param: 'model' })
}

/** The model to answer with, or the ApiError saying why none can. */
export function resolveModel (models: ModelRegistry, id: string): RegisteredModel {
  const model = models.get(id)
  if (!model) throw modelNotFound(id)
  const state = models.state(id)
  if (state.state === 'loading') {
    throw new ApiError('model_unavailable', `The model '${id}' is still loading; retry shortly.`, { param: 'model', headers: { 'retry-after': '5' } })
  }
  if (state.state === 'unavailable') throw unavailableError(id, state)
  return model
}

export class CompletionPipeline {
  readonly #opts: PipelineOptions
  readonly #admission: Admission
  /** Each account's previous prompt, for the part its prefix cache likely holds (the reservation's estimate). */
  readonly #history = new PromptHistory()

  constructor (opts: PipelineOptions) {
    this.#opts = opts
    this.#admission = new Admission(opts.queueSize)
  }

  get metrics (): Metrics {
    return this.#opts.metrics
  }

  /**
   * Refuses a key past its tier's limits right now (429, counting nothing), before a door does work
   * whose size it cannot know yet: reading a stored conversation, translating a long body.
   */
  async precheck (request: FastifyRequest, model?: string): Promise<void> {
    if (!request.account) throw new ApiError('missing_api_key', 'Missing API key.')
    // A model that does not exist is 404 at every door, as the chat door's lookup says it before the
    // tier's models are read; not 403 "the tier may not use it".
    if (model !== undefined && !this.#opts.models.get(model)) throw modelNotFound(model)
    await this.#opts.limits.limiter.precheck(request.account, model)
  }

  /**
   * Counts a request that generates nothing (a token count, a stored response read) as one of the
   * tier's requests per minute, before its work; the reply gets the x-ratelimit-* headers.
   */
  async countRequest (request: FastifyRequest, reply: FastifyReply): Promise<void> {
    if (!request.account) throw new ApiError('missing_api_key', 'Missing API key.')
    reply.headers(await this.#opts.limits.limiter.countRequest(request.account))
  }

  get searchConfigured (): boolean {
    return this.#opts.search !== undefined
  }

  /** The configured web search, for a door that offers it as a tool; absent without SEARCH_PROVIDER. */
  get webSearch (): WebSearch | undefined {
    return this.#opts.search
  }

  get models (): ModelRegistry {
    return this.#opts.models
  }

  /** MAX_MESSAGES, MAX_MESSAGE_CHARS and MAX_CONTENT_PARTS: a door counts its own parts or blocks before it joins them. */
  get inputLimits (): InputLimits {
    return this.#opts.inputLimits
  }

  /**
   * The checks of a request's size and model, for a door's request that generates nothing (a token
   * count): the input limits, then the model; refusals name the door's fields.
   */
  checkInput (body: CompletionRequest, fields?: FieldTable): RegisteredModel {
    try {
      checkInputLimits(body, this.#opts.inputLimits)
      checkCompletionRequest(body)
      return resolveModel(this.#opts.models, body.model)
    } catch (err) {
      throw inDoorTerms(err, fields ? fieldNames(fields) : neutralNames)
    }
  }

  /**
   * Checks, admits and starts one completion. Throws an ApiError for every refusal (before or
   * after admission: after it, the usage row says how it ended). Resolves undefined when the client
   * left before generation started (nobody to answer).
   */
  async start (request: FastifyRequest, reply: FastifyReply, body: CompletionRequest, opts: StartOptions = {}): Promise<StartedCompletion | undefined> {
    const startedAt = performance.now()
    // Metrics and the model span watch every request from here, refused ones too (observe.ts).
    const watch = new RequestWatch(request, reply, { metrics: this.#opts.metrics, models: this.#opts.models, tracing: this.#opts.tracing, startedAt })
    // The one place errors are named in the door's terms: the refusals here, and the events' below.
    const names = opts.fields ? fieldNames(opts.fields) : neutralNames
    let started: StartedCompletion | undefined
    try {
      started = await this.#start(request, reply, body, opts, names, watch, startedAt)
    } catch (err) {
      watch.refused(err, body.model)
      throw inDoorTerms(err, names)
    }
    return started && { ...started, events: namedErrors(started.events, names) }
  }

  async #start (request: FastifyRequest, reply: FastifyReply, body: CompletionRequest, opts: StartOptions, names: FieldNames, watch: RequestWatch, startedAt: number): Promise<StartedCompletion | undefined> {
    const { models, inputLimits, search, limits, drainDeadline } = this.#opts
    checkInputLimits(body, inputLimits)
    checkCompletionRequest(body) // the bounds the chat body has, on every door's translation
    const model = resolveModel(models, body.model)
    const completionId = opts.id ?? newCompletionId()
    watch.model(model, body, completionId)
    const toolFormat = model.backend.toolCallFormat?.()
    checkRequest(body, { searchConfigured: search !== undefined, promptsTools: toolFormat !== undefined })
    this.#admission.assertRoom(model.id) // a full model refuses before any limit is counted or row written
    // A JSON response_format for the local engine: its schema is checked before the request counts
    // (cheap and bounded: what the grammar could not compile or, with strict, not enforce is a 400)...
    // A forced tool call's tools' arguments take the same path (grammar-formats.ts).
    const formats = model.backend.prepareResponseFormats !== undefined ? grammarFormats(body, toolFormat !== undefined) : []
    const compiles = formats.length > 0
    checkGrammarFormats(formats)
    // From here on the request counts: every way it ends writes its usage row (metering.ts).
    const meter = await watch.phase('limits', () => admitCompletion(request, reply, limits, body, model, startedAt, completionId, this.#history, watch, names))
    const stop = stopSignal(reply, drainDeadline)
    const signal = stop.signal
    let events: AsyncIterable<CompletionEvent>
    let searched: SearchDone | undefined
    let generateRequest: GenerateRequest
    const scope = String(request.account?.id ?? '')
    try {
      // ...and compiled only now, once admitted, all together under one time limit: a compile is
      // paid for, and a refused key compiles nothing.
      if (compiles) {
        try {
          await model.backend.prepareResponseFormats?.(formats.map(f => f.format), { scope, signal })
        } catch (err) {
          if (stop.byShutdown()) throw drainDeadlineError()
          if (signal.aborted) return undefined // the client left while its schema compiled: the compile was stopped
          // A schema that failed cost the compile: its prompt's reservation stands for the minute.
          if (err instanceof FormatCompileError) meter.charge()
          throw atField(err, formats[err instanceof FormatCompileError ? err.index : 0]?.field ?? 'response_format')
        }
      }
      if (body.search === true && search) {
        try {
          searched = await watch.phase('search', () => searchFor(body, search, signal, scope))
        } catch (err) {
          if (stop.byShutdown()) throw drainDeadlineError()
          if (signal.aborted) return undefined // the client left while the search ran
          throw err
        }
      }
      generateRequest = toGenerateRequest(body, {
        thinkingBudget: model.thinkingBudget,
        contextLength: model.backend.contextLength,
        systemPrompt: model.systemPrompt,
        search: searched,
        toolFormat,
      })
      generateRequest.maxTokens = meter.maxTokens(generateRequest.maxTokens)
      if (meter.maxTotalTokens !== undefined) generateRequest.maxTotalTokens = meter.maxTotalTokens
      // The prefix cache is the account's own (and its cache_salt's): set here, from the authenticated account.
      generateRequest.cacheScope = cacheScope(request.account!.id, body.cacheSalt) // admitCompletion refused a request without one
      if (compiles) generateRequest.grammarScope = scope // whose compiled grammars the request may use
      const release = this.#admission.acquire(model.id)
      try {
        const generate = (request: GenerateRequest): AsyncIterable<GenerateEvent> => withReasoningMode(watch.call(request, call => model.backend.generate(call, signal)), model.reasoning)
        const rounds = opts.continueAfterCalls
        // A searched reply's next turn searches again, and a reply in rounds ends on another
        // conversation than the request's: neither start is worth computing ahead.
        const shaped: AsyncIterable<CompletionEvent> = rounds
          ? withRounds(generateRequest, generate, (calls, signal) => watch.phaseOf('search round', rounds(calls, signal)), signal,
            request => meter.reserveMore(roundPromptEstimate(request, model.backend.charsPerToken)))
          : searched ? generate(generateRequest) : withNextTurn(generate(generateRequest), model.backend, generateRequest)
        events = meter.wrap(watch.events(shaped, release))
      } catch (err) {
        release() // a backend whose generate() throws synchronously never starts the observer
        throw err
      }
    } catch (err) {
      await meter.fail(err)
      throw err
    }
    const meta = newCompletionMeta(model.id, model.fingerprint, searched?.results, completionId)
    return { model, events, meta, stop, watch }
  }
}

/** The events, with whatever they throw named in the door's terms. */
async function * namedErrors (events: AsyncIterable<CompletionEvent>, names: FieldNames): AsyncIterable<CompletionEvent> {
  try {
    yield * events
  } catch (err) {
    throw inDoorTerms(err, names)
  }
}
