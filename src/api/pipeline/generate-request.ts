// Turns a validated request body into what a backend sees. Checks that the
// schema cannot express (n, the controls' values, search availability) live
// here too, so the route stays a wiring diagram. The prompt shaping itself
// (controls -> instruction, sources, earlier thinking) is src/prompt's.

import { jsonFormatOf, type ChatMessage, type GenerateRequest, type ResponseFormat, type ToolChoice, type ToolDefinition } from '../../engine/backend.ts'
import type { ToolCallFormat } from '../../engine/tools/format.ts'
import { toolsBlock } from '../../engine/tools/prompting.ts'
import { forcedCallTools } from '../../engine/tools/forced-call.ts'
import { invalidParam } from '../../errors.ts'
import { wordcountBudget } from '../../prompt/budget.ts'
import { controlInstruction } from '../../prompt/controls.ts'
import { sourcesBlock } from '../../prompt/search-context.ts'
import { shapeConversation, type SystemPromptPlacement } from '../../prompt/shape.ts'
import type { SearchResult } from '../../search/provider.ts'
import { searchQuery } from '../../search/query.ts'
import type { WebSearch } from '../../search/web-search.ts'
import { DEFAULTS, type ChatCompletionRequest } from '../chat/schema.ts'
import { FieldError, fieldError, fields, type MessagePart } from './fields.ts'

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
  /** The backend renders tools into the prompt in this format (the local engine): the tools block is added to the system text. */
  toolFormat?: ToolCallFormat
  /** The sampling fields the client sent itself (before the schema's defaults filled the others in). */
  clientSampling?: GenerateRequest['clientSampling']
}

/**
 * Everything about a request that can be refused before any work starts:
 * n, language, tone (400 naming the field), and googleSearchStatus without a
 * search provider (400 search_unavailable rather than an answer without search).
 */
export function checkRequest (body: ChatCompletionRequest, opts: { searchConfigured: boolean; promptsTools?: boolean }): void {
  if (body.n !== undefined && body.n !== null && body.n !== 1) {
    throw invalidParam('n', 'Only n=1 is supported.')
  }
  checkToolMessages(body)
  checkLogitBias(body)
  checkTools(body, opts.promptsTools === true)
  controlInstruction(controlsOf(body))
  // 0 is the default, so it asks for nothing and stands without logprobs; more needs logprobs.
  const topLogprobs = body.top_logprobs
  if (topLogprobs !== undefined && topLogprobs !== null && topLogprobs > 0 && body.logprobs !== true) {
    throw fieldError('top_logprobs', name => `${name('top_logprobs')} ${topLogprobs} needs ${name('logprobs')}: true.`)
  }
  responseFormatOf(body)
  if (body.googleSearchStatus && !opts.searchConfigured) {
    throw new FieldError('search', name => `${name('search')} is true but no search provider is configured on this server.`, { code: 'search_unavailable' })
  }
}

/** logit_bias keys are token ids written in decimal (the schema checks the values of such keys only). */
function checkLogitBias (body: ChatCompletionRequest): void {
  for (const key of Object.keys(body.logit_bias ?? {})) {
    if (!/^(0|[1-9][0-9]{0,8})$/.test(key)) throw fieldError('logit_bias', name => `${name('logit_bias')}: ${JSON.stringify(key.slice(0, 20))} is not a token id (a non-negative integer written as a string).`)
  }
}

/** Tool turns in the conversation: each field where the role allows it, each result after the calls it answers. */
function checkToolMessages (body: ChatCompletionRequest): void {
  body.messages.forEach((m, i) => {
    const at = (part: MessagePart) => fields.message(i, part)
    const refuse = (part: MessagePart, why: string) => fieldError(at(part), name => `${name(at(part))}${why}`)
    const calls = m.tool_calls ?? []
    if (calls.length > 0 && m.role !== 'assistant') throw refuse('tool_calls', ': only assistant messages carry tool calls.')
    if ((m.content === undefined || m.content === null) && calls.length === 0) {
      throw refuse('content', ' may be null or absent only on an assistant message with tool_calls.')
    }
    if (m.role === 'tool') {
      const before = body.messages[i - 1]
      if (before === undefined || !(before.role === 'tool' || (before.role === 'assistant' && (before.tool_calls?.length ?? 0) > 0))) {
        throw refuse('role', ': a tool message must follow the assistant message whose tool_calls it answers (or another tool message).')
      }
      if (m.tool_call_id === undefined) throw refuse('tool_call_id', ': a tool message needs the id of the call it answers.')
    } else if (m.tool_call_id !== undefined) {
      throw refuse('tool_call_id', ': only tool messages carry one.')
    }
  })
}

/**
 * tools, tool_choice and parallel_tool_calls: names unique, a named choice among the tools. A
 * backend that prompts for tools (the local engine) writes a `required` or named call by
 * construction (a constraint on the answer), which excludes a JSON response_format there.
 */
function checkTools (body: ChatCompletionRequest, promptsTools: boolean): void {
  const names = new Set<string>()
  ;(body.tools ?? []).forEach((tool, i) => {
    const at = fields.tool(i, 'name')
    if (names.has(tool.function.name)) throw fieldError(at, name => `${name(at)}: two tools are named '${tool.function.name}'.`)
    names.add(tool.function.name)
  })
  const choice = body.tool_choice
  if (choice === undefined || choice === null || choice === 'none' || choice === 'auto') return
  const chosen = JSON.stringify(choice)
  if (names.size === 0) throw fieldError('tool_choice', name => `${name('tool_choice')} ${chosen} needs ${name('tools')}.`)
  if (typeof choice === 'object' && !names.has(choice.function.name)) {
    throw fieldError('tool_choice', name => `${name('tool_choice')} names '${choice.function.name}', which is not among the ${name('tools')}.`)
  }
  // The engine writes the call by construction; a JSON response_format would constrain the same answer.
  if (promptsTools && body.response_format !== undefined && body.response_format !== null && body.response_format.type !== 'text') {
    throw fieldError('tool_choice', name => `${name('tool_choice')} ${chosen} makes the answer a tool call, so it cannot also follow a JSON ${name('response_format')} on this model; send one or the other.`)
  }
}

/** Runs the request's web search (googleSearchStatus): the query comes from the last user message. */
export async function searchFor (body: ChatCompletionRequest, search: WebSearch, signal: AbortSignal, scope: string): Promise<SearchDone> {
  const query = searchQuery(clientMessages(body))
  return { query, results: await search.search(query, signal, scope) }
}

/** The backend's request: the shaped conversation and the sampling settings. Run checkRequest first. */
export function toGenerateRequest (body: ChatCompletionRequest, ctx: ShapingContext = {}): GenerateRequest {
  const instruction = controlInstruction(controlsOf(body))
  const sources = ctx.search ? sourcesBlock(ctx.search.query, ctx.search.results) : ''
  const tools = toolFields(body)
  // A backend that prompts for tools gets them listed in the system text (engine/tools/prompting.ts).
  const forced = ctx.toolFormat ? forcedCallTools(tools.tools, tools.toolChoice) : undefined
  const offered = ctx.toolFormat ? toolsBlock(ctx.toolFormat, tools.tools, tools.toolChoice, tools.parallelToolCalls !== false) : ''
  const messages = shapeConversation(clientMessages(body), [instruction, sources, offered], ctx.systemPrompt)

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
    // A forced call is a constrained answer too: the same thinking budget leaves it room.
    ...(forced && ctx.thinkingBudget ? { thinkingBudget: ctx.thinkingBudget } : {}),
    ...tools,
    ...(body.presence_penalty ? { presencePenalty: body.presence_penalty } : {}),
    ...(body.frequency_penalty ? { frequencyPenalty: body.frequency_penalty } : {}),
    ...(body.logit_bias && Object.keys(body.logit_bias).length > 0 ? { logitBias: body.logit_bias } : {}),
    ...(body.min_p ? { minP: body.min_p } : {}),
    ...(body.reasoning_effort ? { reasoningEffort: body.reasoning_effort } : {}),
    ...(ctx.clientSampling ? { clientSampling: ctx.clientSampling } : {}),
  }
}

/** The request's tools as the backend takes them; none without tools. */
function toolFields (body: ChatCompletionRequest): Pick<GenerateRequest, 'tools' | 'toolChoice' | 'parallelToolCalls'> {
  const fields: Pick<GenerateRequest, 'tools' | 'toolChoice' | 'parallelToolCalls'> = {}
  if (body.tools && body.tools.length > 0) {
    fields.tools = body.tools.map((t): ToolDefinition => ({
      type: 'function',
      function: {
        name: t.function.name,
        ...(t.function.description !== undefined ? { description: t.function.description } : {}),
        ...(t.function.parameters !== undefined ? { parameters: t.function.parameters as Record<string, unknown> } : {}),
        ...(typeof t.function.strict === 'boolean' ? { strict: t.function.strict } : {}),
      },
    }))
  }
  if (body.tool_choice !== undefined && body.tool_choice !== null) fields.toolChoice = body.tool_choice as ToolChoice
  if (typeof body.parallel_tool_calls === 'boolean') fields.parallelToolCalls = body.parallel_tool_calls
  return fields
}

/** The request's response_format as the backend takes it; 400 naming the part at fault. Absent: undefined. */
export function responseFormatOf (body: ChatCompletionRequest): ResponseFormat | undefined {
  const format = body.response_format
  if (format === undefined || format === null) return undefined
  if (format.type !== 'json_schema') return { type: format.type }
  if (format.json_schema === undefined) {
    throw fieldError('response_format.json_schema', name => `${name('response_format')} of type json_schema needs a json_schema object: {"name": …, "schema": {…}}.`)
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

/** The client's messages with text-part arrays joined, developer taken as system, tool turns kept. */
function clientMessages (body: ChatCompletionRequest): ChatMessage[] {
  return body.messages.map(m => {
    const content = m.content ?? ''
    const message: ChatMessage = {
      role: m.role === 'developer' ? 'system' : m.role,
      content: typeof content === 'string' ? content : content.map(part => part.text).join(''),
    }
    if (m.tool_calls && m.tool_calls.length > 0) {
      message.toolCalls = m.tool_calls.map(c => ({ id: c.id, type: 'function', function: { name: c.function.name, arguments: c.function.arguments } }))
    }
    if (m.role === 'tool' && m.tool_call_id !== undefined) message.toolCallId = m.tool_call_id
    return message
  })
}
