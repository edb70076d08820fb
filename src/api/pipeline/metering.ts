// Limits and usage for one chat completion. `admitCompletion` runs the tier's
// checks before any work (search, queue, generation) and puts the
// x-ratelimit-* headers on the reply; the RequestMeter it returns watches the
// generation and, when the request ends however it ends (completed, failed,
// the client gone mid-stream), writes the one usage row and settles the
// reservation with the real token count. The row is committed before the
// response's last byte, so a client that reads its usage right after a reply
// sees that reply in it.

import type { FastifyReply, FastifyRequest } from 'fastify'
import type { UsageRecords } from '../../accounts/usage-records.ts'
import type { GenerateEvent, GenerateRequest, Usage } from '../../engine/backend.ts'
import type { RegisteredModel } from '../../engine/registry.ts'
import { ApiError } from '../../errors.ts'
import type { Limiter, Permit } from '../../limits/limiter.ts'
import type { PromptHistory } from '../../limits/prompt-history.ts'
import { estimatePromptTokens, estimateTokensOfChars } from '../../limits/request-cost.ts'
import type { UsageStatus } from '../../store/schema.ts'
import type { CompletionEvent } from './events.ts'
import { neutralNames, type FieldNames } from './fields.ts'
import type { CompletionRequest } from './request.ts'

/** What watches a request's usage row being written: `work` writes it. */
export interface UsageWatch {
  written (ending: { status: UsageStatus; usage?: Usage; errorCode?: string | null }, work: () => Promise<void>): Promise<void>
}

export interface ChatLimits {
  limiter: Limiter
  usage: UsageRecords
}

interface Ending {
  status: UsageStatus
  usage?: Usage
  errorCode?: string
  /** Text went out before the end: the reservation stands when the real count is unknown. */
  produced: boolean
}

export class RequestMeter {
  readonly #permit: Permit
  readonly #record: (ending: Ending) => Promise<void>
  /** The prompt's estimate the request was admitted with. */
  readonly #promptEstimate: number
  #generating = false
  #ended = false
  /** The request cost work before it failed (a schema's compile): its prompt stays counted. */
  #charged = false

  constructor (permit: Permit, record: (ending: Ending) => Promise<void>, promptEstimate = 0) {
    this.#permit = permit
    this.#record = record
    this.#promptEstimate = promptEstimate
  }

  /**
   * The request made the server work before it failed (a schema's compile that failed or ran out of
   * time): however it ends without usage, its prompt's estimate is counted against the minute's
   * tokens, so failing compiles are not free.
   */
  charge (): void {
    this.#charged = true
  }

  /**
   * Reserves `tokens` more (a later round of the reply, which sends its conversation again); false
   * when they do not fit the minute's tokens, and the round must not run.
   */
  async reserveMore (tokens: number): Promise<boolean> {
    return this.#permit.extend(tokens)
  }

  /** Tokens counted when the request ends with no real usage and no text sent. */
  get unusedCharge (): number {
    return this.#charged ? this.#promptEstimate : 0
  }

  /** The most prompt and reply may use together (the tier's tokens per minute), for the backend; undefined without one. */
  get maxTotalTokens (): number | undefined {
    return this.#permit.totalLimit ?? undefined
  }

  /** The backend's max_tokens: the request's (or its wordcount budget), never more than was reserved for the reply. */
  maxTokens (requested: number | undefined): number | undefined {
    if (requested === undefined) return this.#permit.maxTokens
    return this.#permit.replyLimit === null ? requested : Math.min(requested, this.#permit.replyLimit)
  }

  /** Passes the generation's events through and ends the meter when they stop. */
  wrap (events: AsyncIterable<CompletionEvent>): AsyncIterable<CompletionEvent> {
    // Set now, not on the first read, so a close in between cannot end the request as never started.
    this.#generating = true
    return this.#watch(events)
  }

  async * #watch (events: AsyncIterable<CompletionEvent>): AsyncIterable<CompletionEvent> {
    let finish: Extract<GenerateEvent, { type: 'finish' }> | undefined
    let produced = false
    let failure: unknown
    try {
      for await (const event of events) {
        if (event.type === 'finish') finish = event
        else if (event.type === 'delta' && (event.content || event.reasoning || event.toolCalls)) produced = true
        yield event
      }
    } catch (err) {
      failure = err
      throw err
    } finally {
      if (failure !== undefined) await this.#end({ status: 'failed', errorCode: errorCode(failure), usage: finish?.usage, produced })
      // No finish and no error: the consumer stopped reading (the client went away mid-stream).
      else await this.#end({ status: finish && finish.reason !== 'cancelled' ? 'completed' : 'cancelled', usage: finish?.usage, produced })
    }
  }

  /** The request failed after admission but before generation (search, queue, a refusal while shaping). */
  async fail (err: unknown): Promise<void> {
    await this.#end({ status: 'failed', errorCode: errorCode(err), produced: false })
  }

  /** The response closed; if generation never started (the client left during the search), the request ends here. */
  async closed (): Promise<void> {
    if (!this.#generating) await this.#end({ status: 'cancelled', produced: false })
  }

  async #end (ending: Ending): Promise<void> {
    if (this.#ended) return
    this.#ended = true
    await this.#record(ending)
  }
}

/** What a finished request counts against the minute: its cached prompt tokens at the tier's weight. */
export function countedTokens (usage: Usage, cachedWeight: number): number {
  const cached = Math.min(usage.prompt_tokens_details?.cached_tokens ?? 0, usage.prompt_tokens)
  return Math.ceil(usage.total_tokens - cached * (1 - cachedWeight))
}

/** The prompt estimate of a backend request: a later round of a reply sends all of it again. */
export function roundPromptEstimate (request: GenerateRequest, charsPerToken?: number): number {
  const texts = request.messages.map(m => ({ content: m.content + (m.toolCalls ?? []).map(c => c.function.name + c.function.arguments).join('') }))
  if (request.tools && request.tools.length > 0) texts.push({ content: JSON.stringify(request.tools) })
  return estimatePromptTokens(texts, charsPerToken)
}

function errorCode (err: unknown): string {
  return err instanceof ApiError ? err.code : 'internal_error'
}

/**
 * The limits check for one request; throws the refusal (403/400/429 with
 * headers). On admission the reply carries the x-ratelimit-* headers and the
 * returned meter owns the request's usage row.
 */
export async function admitCompletion (
  request: FastifyRequest,
  reply: FastifyReply,
  limits: ChatLimits,
  body: CompletionRequest,
  model: RegisteredModel,
  startedAt: number,
  /** The completion's id, stored on its usage row. */
  completionId: string | undefined,
  /** The account's previous prompts, for what its prefix cache likely holds. */
  history: PromptHistory,
  /** Told of the usage row as it is written (per-account metrics, the trace's span; observe.ts). */
  watch?: UsageWatch,
  /** The door's names, for the limiter's messages (its errors' params are the neutral ones: fields.ts). */
  names: FieldNames = neutralNames
): Promise<RequestMeter> {
  const account = request.account
  if (!account) throw new ApiError('missing_api_key', 'Missing API key.')
  // A tool call's arguments are prompt text like the content, and so are the tools' definitions
  // (an agent's can be 30 KB: the prompt's largest part). A backend that prompts for tools itself
  // (the local engine) leaves them out with tool_choice none; any other (an upstream) is sent them
  // whatever tool_choice says, so they count.
  // In prompt order (the tools' block comes first), so the account's previous request tells which
  // leading parts its prefix cache likely holds (prompt-history.ts); those count at the tier's
  // cached_prompt_tokens_weight, as the settlement will count the ones really served from it.
  const parts = body.messages.map(m => m.content + (m.toolCalls ?? []).map(c => c.function.name + c.function.arguments).join(''))
  const toolsInPrompt = body.toolChoice !== 'none' || model.backend.toolCallFormat?.() === undefined
  if (body.tools && body.tools.length > 0 && toolsInPrompt) parts.unshift(JSON.stringify(body.tools))
  const tier = limits.limiter.tierOf(account)
  const { cachedChars, remember } = history.guess(`${account.id}\u0000${model.id}\u0000${body.cacheSalt ?? ''}`, parts)
  const chars = parts.reduce((n, part) => n + part.length, 0)
  const maxTokens = body.maxTokens
  const promptTokens = estimateTokensOfChars(chars - cachedChars * (1 - tier.cachedPromptTokensWeight), model.backend.charsPerToken)
  const permit = await limits.limiter.admit(account, {
    model: model.id,
    maxTokens,
    maxTokensName: names('max_tokens'),
    promptTokens,
    contextLength: model.backend.contextLength,
  })
  reply.headers(permit.headers)

  const write = async (ending: Ending): Promise<void> => {
    const failed = ending.status === 'failed'
    const tokens = ending.usage ? countedTokens(ending.usage, tier.cachedPromptTokensWeight) : ending.produced ? null : meter.unusedCharge
    if (ending.usage || ending.produced) remember() // it ran: its prompt is in the cache for the next turn
    try {
      const [, written] = await Promise.all([
        permit.settle(tokens, failed),
        limits.usage.record({
          accountId: account.id,
          keyPrefix: request.apiKeyPrefix ?? '',
          model: model.id,
          promptTokens: ending.usage?.prompt_tokens ?? meter.unusedCharge,
          completionTokens: ending.usage?.completion_tokens ?? 0,
          status: ending.status,
          errorCode: ending.errorCode ?? null,
          latencyMs: performance.now() - startedAt,
          requestId: completionId,
        }),
      ])
      if (written === 'queued') request.log.warn({ completionId }, 'the database is unavailable; the usage row is kept and written when it is back')
    } catch (err) {
      // The reply itself is fine; losing its usage row or settlement is logged, not turned into an error.
      request.log.error({ err }, 'recording usage failed')
    }
  }

  const meter: RequestMeter = new RequestMeter(permit, async ending => {
    if (watch) await watch.written(ending, () => write(ending))
    else await write(ending)
  }, promptTokens)
  reply.raw.once('close', () => { void meter.closed() })
  return meter
}
