// Turns a completion request (request.ts) into what a backend sees. Checks that
// its schema cannot express (n, the controls' values, tool turns in order, search
// availability) live here too, so the pipeline stays a wiring diagram. The
// prompt shaping itself (controls -> instruction, sources, earlier thinking) is
// src/prompt's.

import { jsonFormatOf, type ChatMessage, type GenerateRequest, type ResponseFormat } from '../../engine/backend.ts'
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
import { FieldError, fieldError, fields, type MessagePart } from './fields.ts'
import { DEFAULTS, type CompletionRequest } from './request.ts'

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
}

/**
 * Everything about a request that can be refused before any work starts:
 * n, language, tone (400 naming the field), and a web search without a
 * search provider (400 search_unavailable rather than an answer without search).
 */
export function checkRequest (req: CompletionRequest, opts: { searchConfigured: boolean; promptsTools?: boolean }): void {
  if (req.n !== undefined && req.n !== 1) {
    throw invalidParam('n', 'Only n=1 is supported.')
  }
  checkToolMessages(req)
  checkLogitBias(req)
  checkTools(req, opts.promptsTools === true)
  controlInstruction(controlsOf(req))
  // 0 is the default, so it asks for nothing and stands without logprobs; more needs logprobs.
  const topLogprobs = req.topLogprobs
  if (topLogprobs !== undefined && topLogprobs > 0 && req.logprobs !== true) {
    throw fieldError('top_logprobs', name => `${name('top_logprobs')} ${topLogprobs} needs ${name('logprobs')}: true.`)
  }
  if (req.search === true && !opts.searchConfigured) {
    throw new FieldError('search', name => `${name('search')} is true but no search provider is configured on this server.`, { code: 'search_unavailable' })
  }
}

/** Logit bias keys are token ids written in decimal (the schema checks their values only). */
function checkLogitBias (req: CompletionRequest): void {
  for (const key of Object.keys(req.logitBias ?? {})) {
    if (!/^(0|[1-9][0-9]{0,8})$/.test(key)) throw fieldError('logit_bias', name => `${name('logit_bias')}: ${JSON.stringify(key.slice(0, 20))} is not a token id (a non-negative integer written as a string).`)
  }
}

/** Tool turns in the conversation: each field where the role allows it, each result after the calls it answers. */
function checkToolMessages (req: CompletionRequest): void {
  req.messages.forEach((m, i) => {
    const at = (part: MessagePart) => fields.message(i, part)
    const refuse = (part: MessagePart, why: string) => fieldError(at(part), name => `${name(at(part))}${why}`)
    if ((m.toolCalls?.length ?? 0) > 0 && m.role !== 'assistant') throw refuse('tool_calls', ': only assistant messages carry tool calls.')
    if (m.role === 'tool') {
      const before = req.messages[i - 1]
      if (before === undefined || !(before.role === 'tool' || (before.role === 'assistant' && (before.toolCalls?.length ?? 0) > 0))) {
        throw refuse('role', ': a tool message must follow the assistant message whose tool_calls it answers (or another tool message).')
      }
      if (m.toolCallId === undefined) throw refuse('tool_call_id', ': a tool message needs the id of the call it answers.')
    } else if (m.toolCallId !== undefined) {
      throw refuse('tool_call_id', ': only tool messages carry one.')
    }
  })
}

/**
 * Tools, the tool choice and parallel calls: names unique, a named choice among the tools. A
 * backend that prompts for tools (the local engine) writes a `required` or named call by
 * construction (a constraint on the answer), which excludes a JSON response format there.
 */
function checkTools (req: CompletionRequest, promptsTools: boolean): void {
  const names = new Set<string>()
  ;(req.tools ?? []).forEach((tool, i) => {
    const at = fields.tool(i, 'name')
    if (names.has(tool.function.name)) throw fieldError(at, name => `${name(at)}: two tools are named '${tool.function.name}'.`)
    names.add(tool.function.name)
  })
  const choice = req.toolChoice
  if (choice === undefined || choice === 'none' || choice === 'auto') return
  const chosen = JSON.stringify(choice)
  if (names.size === 0) throw fieldError('tool_choice', name => `${name('tool_choice')} ${chosen} needs ${name('tools')}.`)
  if (typeof choice === 'object' && !names.has(choice.function.name)) {
    throw fieldError('tool_choice', name => `${name('tool_choice')} names '${choice.function.name}', which is not among the ${name('tools')}.`)
  }
  // The engine writes the call by construction; a JSON response format would constrain the same answer.
  if (promptsTools && jsonFormatOf(req.responseFormat) !== undefined) {
    throw fieldError('tool_choice', name => `${name('tool_choice')} ${chosen} makes the answer a tool call, so it cannot also follow a JSON ${name('response_format')} on this model; send one or the other.`)
  }
}

/** Runs the request's web search: the query comes from the last user message. */
export async function searchFor (req: CompletionRequest, search: WebSearch, signal: AbortSignal, scope: string): Promise<SearchDone> {
  const query = searchQuery(clientMessages(req))
  return { query, results: await search.search(query, signal, scope) }
}

/** The sampling fields the client set itself (a relay sends only those; the others hold DEFAULTS). */
function clientSampling (req: CompletionRequest): NonNullable<GenerateRequest['clientSampling']> {
  return { temperature: req.temperature !== undefined, topP: req.topP !== undefined, topK: req.topK !== undefined }
}

/** The backend's request: the shaped conversation and the sampling settings. Run checkRequest first. */
export function toGenerateRequest (req: CompletionRequest, ctx: ShapingContext = {}): GenerateRequest {
  const instruction = controlInstruction(controlsOf(req))
  const sources = ctx.search ? sourcesBlock(ctx.search.query, ctx.search.results) : ''
  const tools = toolFields(req)
  // A backend that prompts for tools gets them listed in the system text (engine/tools/prompting.ts).
  const forced = ctx.toolFormat ? forcedCallTools(tools.tools, tools.toolChoice) : undefined
  const offered = ctx.toolFormat ? toolsBlock(ctx.toolFormat, tools.tools, tools.toolChoice, tools.parallelToolCalls !== false) : ''
  const messages = shapeConversation(clientMessages(req), [instruction, sources, offered], ctx.systemPrompt)

  let maxTokens = req.maxTokens
  if (maxTokens === undefined && typeof req.wordcount === 'number') {
    maxTokens = wordcountBudget({ wordcount: req.wordcount, thinkingBudget: ctx.thinkingBudget ?? 0, contextLength: ctx.contextLength, messages })
  }
  return {
    messages,
    maxTokens,
    temperature: req.temperature ?? DEFAULTS.temperature,
    topP: req.topP ?? DEFAULTS.top_p,
    topK: req.topK ?? DEFAULTS.top_k,
    seed: req.seed,
    stop: req.stop ?? [],
    ...(req.logprobs === true ? { logprobs: true, topLogprobs: req.topLogprobs ?? 0 } : {}),
    ...responseFields(req.responseFormat, ctx.thinkingBudget),
    // A forced call is a constrained answer too: the same thinking budget leaves it room.
    ...(forced && ctx.thinkingBudget ? { thinkingBudget: ctx.thinkingBudget } : {}),
    ...tools,
    ...(req.presencePenalty ? { presencePenalty: req.presencePenalty } : {}),
    ...(req.frequencyPenalty ? { frequencyPenalty: req.frequencyPenalty } : {}),
    ...(req.logitBias && Object.keys(req.logitBias).length > 0 ? { logitBias: req.logitBias } : {}),
    ...(req.minP ? { minP: req.minP } : {}),
    ...(req.reasoningEffort ? { reasoningEffort: req.reasoningEffort } : {}),
    clientSampling: clientSampling(req),
  }
}

/** The request's tools as the backend takes them (copies: a backend may normalise what it is given); none without tools. */
function toolFields (req: CompletionRequest): Pick<GenerateRequest, 'tools' | 'toolChoice' | 'parallelToolCalls'> {
  const fields: Pick<GenerateRequest, 'tools' | 'toolChoice' | 'parallelToolCalls'> = {}
  if (req.tools && req.tools.length > 0) fields.tools = req.tools.map(t => ({ type: 'function', function: { ...t.function } }))
  if (req.toolChoice !== undefined) fields.toolChoice = req.toolChoice
  if (req.parallelToolCalls !== undefined) fields.parallelToolCalls = req.parallelToolCalls
  return fields
}

function responseFields (format: ResponseFormat | undefined, thinkingBudget: number | undefined): Pick<GenerateRequest, 'responseFormat' | 'thinkingBudget'> {
  if (format === undefined) return {}
  // The thinking budget caps the free text before a constrained answer (the local engine).
  return jsonFormatOf(format) && thinkingBudget ? { responseFormat: format, thinkingBudget } : { responseFormat: format }
}

function controlsOf (req: CompletionRequest) {
  return { language: req.language, tone: req.tone, wordcount: req.wordcount }
}

/** The client's messages with developer taken as system, tool turns kept. */
function clientMessages (req: CompletionRequest): ChatMessage[] {
  return req.messages.map(m => {
    const message: ChatMessage = { role: m.role === 'developer' ? 'system' : m.role, content: m.content }
    if (m.toolCalls && m.toolCalls.length > 0) {
      message.toolCalls = m.toolCalls.map(c => ({ id: c.id, type: 'function', function: { name: c.function.name, arguments: c.function.arguments } }))
    }
    if (m.role === 'tool' && m.toolCallId !== undefined) message.toolCallId = m.toolCallId
    return message
  })
}
