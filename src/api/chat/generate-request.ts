// Turns a validated request body into what a backend sees. Checks that the
// schema cannot express (n, the controls' values, search availability) live
// here too, so the route stays a wiring diagram. The prompt shaping itself
// (controls -> instruction, sources, earlier thinking) is src/prompt's.

import { jsonFormatOf, type ChatMessage, type GenerateRequest, type ResponseFormat } from '../../engine/backend.ts'
import { ApiError, invalidParam } from '../../errors.ts'
import { wordcountBudget } from '../../prompt/budget.ts'
import { controlInstruction } from '../../prompt/controls.ts'
import { sourcesBlock } from '../../prompt/search-context.ts'
import { shapeConversation, type SystemPromptPlacement } from '../../prompt/shape.ts'
import type { SearchResult } from '../../search/provider.ts'
import { searchQuery } from '../../search/query.ts'
import type { WebSearch } from '../../search/web-search.ts'
import { DEFAULTS, type ChatCompletionRequest } from './schema.ts'

/** A web search done for one request: what was asked and what came back, in prompt order. */
export interface SearchDone {
  query: string
  results: SearchResult[]
}

export interface ShapingContext {
  /** Thinking tokens added to a wordcount budget (models.json `thinkingBudget`). */
  thinkingBudget?: number
  /** The model's context window, when known: caps the wordcount budget. */
  contextLength?: number
  /** Where the model takes instructions (models.json `systemPrompt`); a system message by default. */
  systemPrompt?: SystemPromptPlacement
  search?: SearchDone
}

/**
 * Everything about a request that can be refused before any work starts:
 * n, language, tone (400 naming the field), and googleSearchStatus without a
 * search provider (400 search_unavailable rather than an answer without search).
 */
export function checkRequest (body: ChatCompletionRequest, opts: { searchConfigured: boolean }): void {
  if (body.n !== undefined && body.n !== null && body.n !== 1) {
    throw invalidParam('n', 'Only n=1 is supported.')
  }
  controlInstruction(controlsOf(body))
  // 0 is the default, so it asks for nothing and stands without logprobs; more needs logprobs.
  if (body.top_logprobs !== undefined && body.top_logprobs !== null && body.top_logprobs > 0 && body.logprobs !== true) {
    throw invalidParam('top_logprobs', `top_logprobs ${body.top_logprobs} needs logprobs: true.`)
  }
  responseFormatOf(body)
  if (body.googleSearchStatus && !opts.searchConfigured) {
    throw new ApiError('search_unavailable', 'googleSearchStatus is true but no search provider is configured on this server.', { param: 'googleSearchStatus' })
  }
}

/** Runs the request's web search (googleSearchStatus): the query comes from the last user message. */
export async function searchFor (body: ChatCompletionRequest, search: WebSearch, signal: AbortSignal): Promise<SearchDone> {
  const query = searchQuery(clientMessages(body))
  return { query, results: await search.search(query, signal) }
}

/** The backend's request: the shaped conversation and the sampling settings. Run checkRequest first. */
export function toGenerateRequest (body: ChatCompletionRequest, ctx: ShapingContext = {}): GenerateRequest {
  const instruction = controlInstruction(controlsOf(body))
  const sources = ctx.search ? sourcesBlock(ctx.search.query, ctx.search.results) : ''
  const messages = shapeConversation(clientMessages(body), [instruction, sources], ctx.systemPrompt)

  let maxTokens = body.max_completion_tokens ?? body.max_tokens ?? undefined
  if (maxTokens === undefined && typeof body.wordcount === 'number') {
    maxTokens = wordcountBudget({ wordcount: body.wordcount, thinkingBudget: ctx.thinkingBudget ?? 0, contextLength: ctx.contextLength, messages })
  }
  const stop = body.stop === undefined || body.stop === null ? [] : typeof body.stop === 'string' ? [body.stop] : body.stop
  return {
    messages,
    maxTokens,
    // Fastify has already filled in the schema's defaults; the fallbacks keep this function total.
    temperature: body.temperature ?? DEFAULTS.temperature,
    topP: body.top_p ?? DEFAULTS.top_p,
    topK: body.top_k ?? DEFAULTS.top_k,
    seed: body.seed ?? undefined,
    stop,
    ...(body.logprobs === true ? { logprobs: true, topLogprobs: body.top_logprobs ?? 0 } : {}),
    ...responseFields(responseFormatOf(body), ctx.thinkingBudget),
  }
}

/** The request's response_format as the backend takes it; 400 naming the part at fault. Absent: undefined. */
export function responseFormatOf (body: ChatCompletionRequest): ResponseFormat | undefined {
  const format = body.response_format
  if (format === undefined || format === null) return undefined
  if (format.type !== 'json_schema') return { type: format.type }
  if (format.json_schema === undefined) {
    throw invalidParam('response_format.json_schema', 'response_format of type json_schema needs a json_schema object: {"name": …, "schema": {…}}.')
  }
  const { name, description, schema, strict } = format.json_schema
  return {
    type: 'json_schema',
    json_schema: {
      name,
      ...(description !== undefined ? { description } : {}),
      ...(schema !== undefined ? { schema: schema as Record<string, unknown> } : {}),
      ...(strict !== undefined && strict !== null ? { strict } : {}),
    },
  }
}

function responseFields (format: ResponseFormat | undefined, thinkingBudget: number | undefined): Pick<GenerateRequest, 'responseFormat' | 'thinkingBudget'> {
  if (format === undefined) return {}
  // The thinking budget caps the free text before a constrained answer (the local engine).
  return jsonFormatOf(format) && thinkingBudget ? { responseFormat: format, thinkingBudget } : { responseFormat: format }
}

function controlsOf (body: ChatCompletionRequest) {
  return { language: body.language, tone: body.tone, wordcount: body.wordcount }
}

/** The client's messages with text-part arrays joined. */
function clientMessages (body: ChatCompletionRequest): ChatMessage[] {
  return body.messages.map(m => ({
    role: m.role,
    content: typeof m.content === 'string' ? m.content : m.content.map(part => part.text).join(''),
  }))
}
