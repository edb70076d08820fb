// An OpenAI-compatible server (vLLM, llama.cpp, Ollama, a hosted API, another
// chatd) as a Backend: models.json entries with `"backend": "openai"`.
//
// One generation is one POST under the upstream's own model name and key, always
// streamed, in the API its entry names (`api`): chat completions, OpenAI's
// Responses API or Anthropic's Messages API, each a wire (wire.ts) that builds
// the body and reads the stream events. Whatever the API, they become chatd's events, so clients see chatd's ids and frame sequence whatever
// the upstream. Failures before the upstream has sent anything (refused or
// timed-out connections, 408/429/5xx) are retried a bounded number of times;
// after that nothing is, because part of the reply may already be on its way to
// the client. The client going away aborts the upstream request.

import { setTimeout as sleep } from 'node:timers/promises'
import { createParser } from 'eventsource-parser'
import { Agent, request, type Dispatcher } from 'undici'
import { ApiError } from '../../errors.ts'
import { wallClock, type Backend, type BackendState, type DeltaLogprobs, type FinishReason, type GenerateEvent, type GenerateRequest, type GenerateTimings, type Usage } from '../backend.ts'
import { ReasoningSplitter } from '../reasoning.ts'
import { networkCause } from '../../network-errors.ts'
import { StopStringMatcher } from '../stop-strings.ts'
import { cutOff, refused, saysContextOverflow, timedOut, unreachable, unreadable } from './failures.ts'
import type { ReplyPiece } from './reply.ts'
import { sendsMaxCompletionTokens } from './request-body.ts'
import { DEFAULT_UPSTREAM_SETTINGS, type UpstreamSettings } from './settings.ts'
import { estimatePromptTokens, estimateTokens } from './usage.ts'
import { endpointUrl, type StreamReader, type Wire, type WireApi, type WireModel } from './wire.ts'
import { chatWire } from './wire-chat.ts'
import { messagesWire } from './wire-messages.ts'
import { responsesWire } from './wire-responses.ts'

export interface UpstreamBackendOptions {
  id: string
  /** The API root as OpenAI clients take it, e.g. http://127.0.0.1:8000/v1. */
  baseUrl: string
  /** Sent as a Bearer token (the Messages API: `x-api-key`); empty or absent sends none. */
  apiKey?: string
  /** The API the upstream is spoken to in: chat completions (default), Responses or Messages. */
  api?: WireApi
  upstreamModel: string
  passTopK?: boolean
  /** Send the cache scope as `cache_salt` (vLLM); see UpstreamModel. */
  passCacheSalt?: boolean
  /** Send max_completion_tokens instead of max_tokens; default: true for api.openai.com. */
  maxCompletionTokens?: boolean
  /** The upstream's chat template leaves the prompt inside an open `<think>` (R1 served without a reasoning parser). */
  startsInReasoning?: boolean
  contextLength?: number
  settings?: UpstreamSettings
}

/**
 * The usage without the upstream's cached_tokens: an upstream that keeps one prefix cache for all
 * of chatd's accounts would count another account's prompts in it.
 */
function withoutCachedTokens (usage: Usage): Usage {
  const { prompt_tokens_details: _shared, ...own } = usage
  return own
}

/** An error body is read only this far; a non-streamed reply, a bit further. */
const MAX_ERROR_BYTES = 64 * 1024
const MAX_REPLY_BYTES = 16 * 1024 * 1024
/** One SSE event larger than this is no chunk of a reply, in any of the APIs. */
const MAX_EVENT_BYTES = 1024 * 1024
const BACKOFF_MS = 200
const MAX_BACKOFF_MS = 2000

/** <baseUrl>/chat/completions. Throws (without echoing the URL, which may be private) when baseUrl is no http(s) URL. */
export function chatCompletionsUrl (baseUrl: string): URL {
  return endpointUrl(baseUrl, 'chat/completions')
}

function wireFor (api: WireApi, model: WireModel): Wire {
  if (api === 'responses') return responsesWire(model)
  if (api === 'messages') return messagesWire(model)
  return chatWire(model)
}

export class UpstreamBackend implements Backend {
  readonly id: string
  readonly contextLength?: number
  readonly #endpoint: URL
  readonly #headers: Record<string, string>
  readonly #wire: Wire
  readonly #passCacheSalt: boolean
  readonly #startsInReasoning: boolean
  readonly #settings: UpstreamSettings
  readonly #agent: Agent
  #closed = false

  constructor (opts: UpstreamBackendOptions) {
    this.id = opts.id
    this.contextLength = opts.contextLength
    const api = opts.api ?? 'chat'
    // The path does not change the host, which is all sendsMaxCompletionTokens looks at.
    const probe = endpointUrl(opts.baseUrl, 'chat/completions')
    this.#passCacheSalt = opts.passCacheSalt ?? false
    this.#wire = wireFor(api, {
      upstreamModel: opts.upstreamModel,
      passTopK: opts.passTopK ?? false,
      passCacheSalt: this.#passCacheSalt,
      maxCompletionTokens: sendsMaxCompletionTokens(probe, opts.maxCompletionTokens),
    })
    this.#endpoint = endpointUrl(opts.baseUrl, this.#wire.path)
    this.#headers = {
      'content-type': 'application/json',
      accept: 'text/event-stream, application/json',
      'user-agent': 'chatd',
      ...this.#wire.headers(opts.apiKey),
    }
    this.#startsInReasoning = opts.startsInReasoning ?? false
    this.#settings = opts.settings ?? DEFAULT_UPSTREAM_SETTINGS
    this.#agent = new Agent({
      connect: { timeout: this.#settings.connectTimeoutMs },
      headersTimeout: this.#settings.firstByteTimeoutMs,
      bodyTimeout: this.#settings.idleTimeoutMs,
    })
  }

  state (): BackendState {
    // Nothing to load: whether the upstream is up is found out per request
    // (and answered with 502/504), so it may come and go without a restart.
    // Closed only as the server shuts down: another replica, or this one restarted, answers.
    return this.#closed ? { state: 'unavailable', reason: 'closed', retryAfterS: 1 } : { state: 'ready' }
  }

  async load (): Promise<void> {}

  async * generate (request: GenerateRequest, signal: AbortSignal): AsyncGenerator<GenerateEvent> {
    const wire = this.#wire
    const payload = JSON.stringify(wire.body(request))
    // Aborted when the client goes away and when the consumer stops reading.
    const controller = new AbortController()
    const abort = (): void => controller.abort()
    signal.addEventListener('abort', abort, { once: true })
    if (signal.aborted) abort()

    let textDeltas = 0
    let toolDeltas = 0
    let allText = ''
    let whole = false
    let reportedUsage: Usage | undefined
    const usage = (): Usage => {
      if (reportedUsage) return this.#passCacheSalt ? reportedUsage : withoutCachedTokens(reportedUsage)
      const prompt = estimatePromptTokens(request.messages)
      const completion = whole ? estimateTokens(allText) : textDeltas + toolDeltas
      return { prompt_tokens: prompt, completion_tokens: completion, total_tokens: prompt + completion }
    }

    let body: Dispatcher.ResponseData['body'] | undefined
    const timings: GenerateTimings = { sentAt: wallClock() }
    try {
      const response = await this.#send(payload, controller.signal, request.traceContext)
      timings.respondedAt = wallClock()
      body = response.body
      const contentType = String(response.headers['content-type'] ?? '').toLowerCase()
      const progress = { done: false }
      let pieces: AsyncIterable<ReplyPiece>
      if (contentType.startsWith('text/event-stream')) {
        pieces = streamedPieces(body, wire.streamReader(), progress)
      } else if (contentType.includes('json')) {
        whole = true
        pieces = wholePiece(body, wire, progress)
      } else {
        throw unreadable('neither an event stream nor JSON')
      }

      let finishReason: string | undefined
      let stopReason: string | undefined
      // Decided by the first piece with text: an upstream that separates the
      // reasoning itself gets no splitter; otherwise `<think>` in its content is split here.
      let splitter: ReasoningSplitter | null | undefined = wire.separatesReasoning ? null : undefined
      // An API without stop strings (Responses): the text is cut at them here, and the reply ends there.
      const stops = !wire.sendsStop && request.stop.length > 0 ? new StopStringMatcher(request.stop) : undefined
      for await (const piece of pieces) {
        if (piece.usage) reportedUsage = piece.usage
        if (piece.finishReason !== undefined) finishReason = piece.finishReason
        if (piece.stopReason !== undefined) stopReason = piece.stopReason
        if (stops) {
          const cut = stops.push(piece.content)
          piece.content = cut.emit
          if (cut.stopped) {
            finishReason = 'stop'
            stopReason = stops.matchedStop ?? undefined
            progress.done = true
          }
        }
        if (piece.toolCalls) {
          toolDeltas++
          allText += piece.toolCalls.map(c => (c.name ?? '') + (c.arguments ?? '')).join('')
          yield { type: 'delta', toolCalls: piece.toolCalls }
        }
        if (piece.content === '' && piece.reasoning === '') {
          if (piece.logprobs) yield { type: 'delta', logprobs: piece.logprobs }
          if (stops?.stopped) break
          continue
        }
        textDeltas++
        allText += piece.reasoning + piece.content
        if (splitter === undefined) splitter = piece.reasoning !== '' ? null : new ReasoningSplitter(this.#startsInReasoning)
        const split = splitter === null ? { reasoning: '', content: piece.content } : splitter.push(piece.content)
        const event = delta(piece.reasoning + split.reasoning, split.content, piece.logprobs)
        if (event) yield event
        if (stops?.stopped) break
      }
      if (stops && !stops.stopped) {
        const rest = stops.flush()
        if (rest !== '') {
          textDeltas++
          allText += rest
          yield { type: 'delta', content: rest }
        }
      }
      if (splitter) {
        const rest = splitter.flush()
        const event = delta(rest.reasoning, rest.content)
        if (event) yield event
      }
      if (!progress.done && finishReason === undefined) throw cutOff()
      const reason = finishReasonOf(finishReason)
      // Only a string the request itself asked to stop at is reported as the one that matched.
      const stopSequence = reason === 'stop' && stopReason !== undefined && request.stop.includes(stopReason) ? stopReason : undefined
      yield { type: 'finish', reason, usage: usage(), ...(stopSequence !== undefined ? { stopSequence } : {}), timings }
    } catch (err) {
      if (signal.aborted) {
        yield { type: 'finish', reason: 'cancelled', usage: usage(), timings }
        return
      }
      throw bodyFailure(err, this.#settings)
    } finally {
      signal.removeEventListener('abort', abort)
      controller.abort()
      // Destroying an unread body makes undici emit an abort error; nobody is listening any more.
      body?.on('error', () => {})
      body?.destroy()
    }
  }

  /**
   * POSTs the request, retrying failures that happen before the upstream sends anything.
   * `traceContext`: the trace's headers (traceparent), when the server traces the request.
   */
  async #send (payload: string, signal: AbortSignal, traceContext?: Record<string, string>): Promise<Dispatcher.ResponseData> {
    const headers = traceContext ? { ...this.#headers, ...traceContext } : this.#headers
    for (let attempt = 0; ; attempt++) {
      let failure: ApiError
      try {
        const response = await request(this.#endpoint, { method: 'POST', headers, body: payload, signal, dispatcher: this.#agent })
        if (response.statusCode >= 200 && response.statusCode <= 299) return response
        const text = await readText(response.body, MAX_ERROR_BYTES).catch(() => '')
        response.body.on('error', () => {})
        response.body.destroy()
        const refusal = response.statusCode === 400 ? parseJson(text) : undefined
        failure = refused(response.statusCode, refusal !== undefined && saysContextOverflow(refusal), refusal === undefined ? undefined : this.#wire.relayedParam(refusal))
        if (!this.#wire.retryable(response.statusCode)) throw failure
      } catch (err) {
        if (signal.aborted || err instanceof ApiError) throw err
        failure = connectFailure(err, this.#settings)
      }
      if (attempt >= this.#settings.retries) throw failure
      await sleep(Math.min(BACKOFF_MS * 2 ** attempt, MAX_BACKOFF_MS), undefined, { signal })
    }
  }

  async close (): Promise<void> {
    this.#closed = true
    await this.#agent.destroy()
  }
}

/** A delta with what it carries; the upstream's token log-probabilities ride with the text of the chunk that brought them. */
function delta (reasoning: string, content: string, logprobs?: DeltaLogprobs): GenerateEvent | undefined {
  if (reasoning === '' && content === '' && !logprobs) return undefined
  const event: Extract<GenerateEvent, { type: 'delta' }> = { type: 'delta' }
  if (reasoning !== '') event.reasoning = reasoning
  if (content !== '') event.content = content
  if (logprobs) event.logprobs = logprobs
  return event
}

/** `length` and `tool_calls` are kept; every other reason (stop, eos, content_filter) ended the reply normally. */
function finishReasonOf (reason: string | undefined): FinishReason {
  return reason === 'length' || reason === 'tool_calls' ? reason : 'stop'
}

/** The pieces of an SSE reply, as the wire reads them; sets `progress.done` once it says the reply is complete. */
async function * streamedPieces (body: AsyncIterable<Buffer | string>, reader: StreamReader, progress: { done: boolean }): AsyncGenerator<ReplyPiece> {
  const frames: Array<{ event?: string; data: string }> = []
  let oversized = false
  const parser = createParser({
    onEvent: event => { frames.push(event) },
    onError: error => { if (error.type === 'max-buffer-size-exceeded') oversized = true },
    maxBufferSize: MAX_EVENT_BYTES,
  })
  const decoder = new TextDecoder()
  for await (const chunk of body) {
    parser.feed(typeof chunk === 'string' ? chunk : decoder.decode(chunk, { stream: true }))
    if (oversized) throw unreadable(`an event larger than ${MAX_EVENT_BYTES} bytes`)
    for (let frame = frames.shift(); frame !== undefined; frame = frames.shift()) {
      const piece = reader.read(frame.event, frame.data)
      if (piece) yield piece
      if (reader.done) {
        progress.done = true
        return
      }
    }
  }
}

/** A reply that came as one JSON body (a chat.completion, a response, a message). */
async function * wholePiece (body: AsyncIterable<Buffer | string>, wire: Wire, progress: { done: boolean }): AsyncGenerator<ReplyPiece> {
  const text = await readText(body, MAX_REPLY_BYTES)
  const piece = wire.readWhole(text)
  progress.done = true
  yield piece
}

async function readText (body: AsyncIterable<Buffer | string>, limit: number): Promise<string> {
  const parts: Buffer[] = []
  let size = 0
  for await (const chunk of body) {
    const buffer = typeof chunk === 'string' ? Buffer.from(chunk) : chunk
    size += buffer.length
    if (size > limit) throw unreadable(`a body larger than ${limit} bytes`)
    parts.push(buffer)
  }
  return Buffer.concat(parts).toString('utf8')
}

function parseJson (text: string): unknown {
  try {
    return JSON.parse(text)
  } catch {
    return undefined
  }
}

/** A failure before any response: worth a retry. */
function connectFailure (err: unknown, settings: UpstreamSettings): ApiError {
  const code = (err as { code?: string })?.code
  if (code === 'UND_ERR_CONNECT_TIMEOUT') return timedOut('connect', settings.connectTimeoutMs)
  if (code === 'UND_ERR_HEADERS_TIMEOUT') return timedOut('first byte', settings.firstByteTimeoutMs)
  return unreachable(networkCause(err))
}

/** A failure once the reply had begun. */
function bodyFailure (err: unknown, settings: UpstreamSettings): ApiError {
  if (err instanceof ApiError) return err
  if ((err as { code?: string })?.code === 'UND_ERR_BODY_TIMEOUT') return timedOut('idle', settings.idleTimeoutMs)
  return cutOff()
}
