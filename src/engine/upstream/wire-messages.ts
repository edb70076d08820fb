// Anthropic's Messages API (POST <baseUrl>/messages, streamed; the key in
// `x-api-key`), for upstreams that speak it themselves: system messages go in
// `system`, tool calls as tool_use blocks and their results as tool_result
// blocks of a user turn; the stream's events (content_block_start/delta,
// message_delta, message_stop) come back as ReplyPieces.

import { ApiError } from '../../errors.ts'
import type { ChatMessage, GenerateRequest, ReasoningEffort, ToolCallDelta, ToolChoice, Usage } from '../backend.ts'
import { reportedError, retryableStatus, unreadable } from './failures.ts'
import { MAX_TOOL_CALL_INDEX, type ReplyPiece } from './reply.ts'
import { isObject, parseJson, type Json } from './json.ts'
import { argumentsObject, type StreamReader, type Wire, type WireModel } from './wire.ts'

export const ANTHROPIC_VERSION = '2023-06-01'
/** The Messages API requires max_tokens; this is sent when the request sets no cap. */
export const DEFAULT_MESSAGES_MAX_TOKENS = 4096
/** Thinking budgets for reasoning_effort (the Messages API's smallest is 1024). */
const THINKING_BUDGET: Record<Exclude<ReasoningEffort, 'none'>, number> = { minimal: 1024, low: 1024, medium: 4096, high: 16384 }
const MIN_THINKING_BUDGET = 1024

function invalid (param: string, message: string): ApiError {
  return new ApiError('invalid_parameter', `This model's upstream speaks Anthropic's Messages API: ${message}`, { param })
}

interface Turn {
  role: 'user' | 'assistant'
  content: Json[]
}

/** The blocks one chat message adds to its turn. */
function blocksOf (m: ChatMessage): Json[] {
  if (m.role === 'tool') return [{ type: 'tool_result', tool_use_id: m.toolCallId ?? '', content: m.content }]
  const blocks: Json[] = m.content === '' ? [] : [{ type: 'text', text: m.content }]
  for (const call of m.toolCalls ?? []) {
    blocks.push({ type: 'tool_use', id: call.id, name: call.function.name, input: argumentsObject(call.function.arguments) })
  }
  return blocks
}

/** The conversation as alternating turns: tool results are user turns, and neighbours of one role merge. */
function turnsOf (messages: ChatMessage[]): Turn[] {
  const turns: Turn[] = []
  for (const m of messages) {
    if (m.role === 'system') continue
    const role = m.role === 'assistant' ? 'assistant' : 'user'
    const blocks = blocksOf(m)
    if (blocks.length === 0) continue
    const last = turns.at(-1)
    if (last?.role === role) last.content.push(...blocks)
    else turns.push({ role, content: blocks })
  }
  return turns
}

function toolChoiceOf (choice: ToolChoice | undefined, parallel: boolean | undefined): Json | undefined {
  const serial = parallel === false ? { disable_parallel_tool_use: true } : {}
  if (choice === undefined) return parallel === false ? { type: 'auto', ...serial } : undefined
  if (choice === 'none') return { type: 'none' }
  if (choice === 'auto') return { type: 'auto', ...serial }
  if (choice === 'required') return { type: 'any', ...serial }
  return { type: 'tool', name: choice.function.name, ...serial }
}

export function messagesBody (request: GenerateRequest, model: WireModel): Json {
  if (request.logprobs) throw invalid('logprobs', 'it has no logprobs.')
  if (request.responseFormat?.type === 'json_object') {
    throw invalid('response_format', 'it has no JSON mode; ask for JSON matching a schema instead (sent as output_config.format).')
  }
  const sent = request.clientSampling ?? { temperature: true, topP: true, topK: true }
  if (sent.temperature && request.temperature > 1) throw invalid('temperature', 'temperature must be between 0 and 1 there.')
  const maxTokens = request.maxTokens ?? DEFAULT_MESSAGES_MAX_TOKENS
  const body: Json = {
    model: model.upstreamModel,
    max_tokens: maxTokens,
    messages: turnsOf(request.messages),
    stream: true,
  }
  const system = request.messages.filter(m => m.role === 'system').map(m => m.content).join('\n\n')
  if (system !== '') body.system = system
  if (sent.temperature) body.temperature = request.temperature
  if (sent.topP) body.top_p = request.topP
  if (sent.topK && request.topK > 0) body.top_k = request.topK
  if (request.stop.length > 0) body.stop_sequences = request.stop
  if (request.tools && request.tools.length > 0) {
    body.tools = request.tools.map(tool => ({
      name: tool.function.name,
      ...(tool.function.description !== undefined ? { description: tool.function.description } : {}),
      input_schema: tool.function.parameters ?? { type: 'object', properties: {} },
    }))
  }
  const toolChoice = toolChoiceOf(request.toolChoice, request.parallelToolCalls)
  if (toolChoice !== undefined && body.tools !== undefined) body.tool_choice = toolChoice
  const effort = request.reasoningEffort
  if (effort === 'none') body.thinking = { type: 'disabled' }
  else if (effort !== undefined) {
    // The budget must leave room for an answer under max_tokens.
    const budget = Math.min(THINKING_BUDGET[effort], maxTokens - 1)
    if (budget >= MIN_THINKING_BUDGET) body.thinking = { type: 'enabled', budget_tokens: budget }
  }
  if (request.responseFormat?.type === 'json_schema') {
    body.output_config = { format: { type: 'json_schema', schema: request.responseFormat.json_schema.schema ?? { type: 'object' } } }
  }
  return body
}

function count (value: unknown): number | undefined {
  return Number.isInteger(value) && (value as number) >= 0 ? value as number : undefined
}

/** Anthropic's input_tokens leaves out the tokens read from and written to the cache; chatd's prompt_tokens counts them all. */
function promptOf (usage: Json): { prompt: number; cached: number } | undefined {
  const input = count(usage.input_tokens)
  if (input === undefined) return undefined
  const cached = count(usage.cache_read_input_tokens) ?? 0
  return { prompt: input + cached + (count(usage.cache_creation_input_tokens) ?? 0), cached }
}

function usageOf (prompt: { prompt: number; cached: number } | undefined, output: number | undefined): Usage | undefined {
  if (prompt === undefined || output === undefined) return undefined
  return { prompt_tokens: prompt.prompt, completion_tokens: output, total_tokens: prompt.prompt + output, prompt_tokens_details: { cached_tokens: prompt.cached } }
}

/** stop_reason in chatd's terms: max_tokens is `length`, tool_use `tool_calls`; the rest ended the reply normally. */
function finishOf (stopReason: unknown): string {
  if (stopReason === 'max_tokens' || stopReason === 'model_context_window_exceeded') return 'length'
  if (stopReason === 'tool_use') return 'tool_calls'
  return 'stop'
}

function text (value: unknown, field: string): string {
  if (value === undefined || value === null) return ''
  if (typeof value !== 'string') throw unreadable(`"${field}" is not text`)
  return value
}

function emptyPiece (): ReplyPiece {
  return { content: '', reasoning: '' }
}

interface OpenCall {
  index: number
  streamed: boolean
  /** The input the block started with (Anthropic's is {}; a server that sends it whole puts it here). */
  input: unknown
}

class MessagesStreamReader implements StreamReader {
  done = false
  /** tool_use blocks by their content block index. */
  readonly #calls = new Map<number, OpenCall>()
  #prompt: { prompt: number; cached: number } | undefined

  read (_event: string | undefined, data: string): ReplyPiece | undefined {
    if (data.trim() === '') return undefined
    const json = parseJson(data, 'an event')
    if (!isObject(json)) throw unreadable('an event that is not an object')
    switch (json.type) {
      case 'message_start': {
        const message = json.message
        if (isObject(message) && isObject(message.usage)) this.#prompt = promptOf(message.usage)
        return undefined
      }
      case 'content_block_start':
        return this.#start(json)
      case 'content_block_delta':
        return this.#delta(json)
      case 'content_block_stop':
        return this.#stop(json)
      case 'message_delta': {
        const delta = isObject(json.delta) ? json.delta : {}
        const usage = isObject(json.usage) ? json.usage : {}
        // Newer servers repeat the input counts here; they are the final ones then.
        this.#prompt = promptOf(usage) ?? this.#prompt
        const piece: ReplyPiece = { ...emptyPiece() }
        if (delta.stop_reason !== undefined && delta.stop_reason !== null) piece.finishReason = finishOf(delta.stop_reason)
        if (typeof delta.stop_sequence === 'string') piece.stopReason = delta.stop_sequence
        const reported = usageOf(this.#prompt, count(usage.output_tokens))
        if (reported) piece.usage = reported
        return piece
      }
      case 'message_stop':
        this.done = true
        return undefined
      case 'error':
        throw reportedError()
      default:
        return undefined // ping, and events newer than this reader
    }
  }

  #start (json: Json): ReplyPiece | undefined {
    const block = json.content_block
    if (!isObject(block) || !Number.isInteger(json.index)) return undefined
    if (block.type === 'text') return { ...emptyPiece(), content: text(block.text, 'text') }
    if (block.type === 'thinking') return { ...emptyPiece(), reasoning: text(block.thinking, 'thinking') }
    if (block.type !== 'tool_use') return undefined // redacted thinking, server tools and their results
    if (this.#calls.size > MAX_TOOL_CALL_INDEX) throw unreadable('too many tool calls')
    const call: OpenCall = { index: this.#calls.size, streamed: false, input: block.input }
    this.#calls.set(json.index as number, call)
    return { ...emptyPiece(), toolCalls: [{ index: call.index, id: text(block.id, 'id'), name: text(block.name, 'name') }] }
  }

  #delta (json: Json): ReplyPiece | undefined {
    const delta = json.delta
    if (!isObject(delta)) return undefined
    if (delta.type === 'text_delta') return { ...emptyPiece(), content: text(delta.text, 'text') }
    if (delta.type === 'thinking_delta') return { ...emptyPiece(), reasoning: text(delta.thinking, 'thinking') }
    if (delta.type !== 'input_json_delta') return undefined // signature and citation deltas
    const call = Number.isInteger(json.index) ? this.#calls.get(json.index as number) : undefined
    const args = text(delta.partial_json, 'partial_json')
    if (call === undefined || args === '') return undefined
    call.streamed = true
    return { ...emptyPiece(), toolCalls: [{ index: call.index, arguments: args }] }
  }

  /** A tool_use block that streamed no input: its input is the one it started with. */
  #stop (json: Json): ReplyPiece | undefined {
    const call = Number.isInteger(json.index) ? this.#calls.get(json.index as number) : undefined
    if (call === undefined || call.streamed) return undefined
    call.streamed = true
    const input = isObject(call.input) ? call.input : {}
    return { ...emptyPiece(), toolCalls: [{ index: call.index, arguments: JSON.stringify(input) }] }
  }
}

/** A whole `message` (an upstream that answered without streaming). */
export function readWholeMessage (body: string): ReplyPiece {
  const json = parseJson(body, 'a body')
  if (!isObject(json)) throw unreadable('a JSON value that is not an object')
  if (json.type === 'error') throw reportedError()
  if (!Array.isArray(json.content)) throw unreadable('no "content" list')
  const piece = emptyPiece()
  const calls: ToolCallDelta[] = []
  for (const block of json.content) {
    if (!isObject(block)) throw unreadable('a content block that is not an object')
    if (block.type === 'text') piece.content += text(block.text, 'text')
    if (block.type === 'thinking') piece.reasoning += text(block.thinking, 'thinking')
    if (block.type === 'tool_use') {
      if (calls.length > MAX_TOOL_CALL_INDEX) throw unreadable('too many tool calls')
      calls.push({ index: calls.length, id: text(block.id, 'id'), name: text(block.name, 'name'), arguments: JSON.stringify(isObject(block.input) ? block.input : {}) })
    }
  }
  if (calls.length > 0) piece.toolCalls = calls
  piece.finishReason = finishOf(json.stop_reason)
  if (typeof json.stop_sequence === 'string') piece.stopReason = json.stop_sequence
  const usage = isObject(json.usage) ? usageOf(promptOf(json.usage), count(json.usage.output_tokens)) : undefined
  if (usage) piece.usage = usage
  return piece
}

export function messagesWire (model: WireModel): Wire {
  return {
    api: 'messages',
    path: 'messages',
    headers: apiKey => ({ 'anthropic-version': ANTHROPIC_VERSION, ...(apiKey ? { 'x-api-key': apiKey } : {}) }),
    body: request => messagesBody(request, model),
    sendsStop: true,
    separatesReasoning: true,
    streamReader: () => new MessagesStreamReader(),
    readWhole: readWholeMessage,
    // 529: Anthropic's "overloaded", which its own clients retry.
    retryable: status => retryableStatus(status) || status === 529,
    relayedParam: () => undefined, // Anthropic's error shape names no field
  }
}
