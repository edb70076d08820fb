// Reading an OpenAI-compatible reply: the pieces of a streamed one (each SSE
// `data:` frame is a chat.completion.chunk), or a whole chat.completion when
// the upstream answers with JSON although chatd asked for a stream. Anything
// of the wrong shape throws, so a confused upstream gives a clean 502 instead
// of a half-understood answer.

import type { DeltaLogprobs, TokenLogprob, ToolCallDelta, TopLogprob, Usage } from '../backend.ts'
import { reportedError, unreadable } from './failures.ts'
import { isObject, parseJson, type Json } from './json.ts'

/** What one chunk (or a whole completion) contributes. */
export interface ReplyPiece {
  content: string
  /** From `reasoning_content` (DeepSeek, vLLM) or `reasoning` (Ollama, OpenRouter, newer vLLM). */
  reasoning: string
  /** Present once the upstream says why it stopped. */
  finishReason?: string
  /** vLLM's `stop_reason`: the stop string that ended the reply (a number there means a stop token: not kept). */
  stopReason?: string
  usage?: Usage
  /** The choice's `logprobs`, when the upstream sent any: its `content` list (and a `reasoning_content` list, if it keeps one). */
  logprobs?: DeltaLogprobs
  /** Tool calls (a whole reply's) or pieces of them (a chunk's `delta.tool_calls`), as the upstream sent them. */
  toolCalls?: ToolCallDelta[]
}

/** A reply's calls are numbered from 0; more than this many is no reply chatd relays. */
export const MAX_TOOL_CALL_INDEX = 127

function optionalText (value: unknown, field: string): string {
  if (value === undefined || value === null) return ''
  if (typeof value !== 'string') throw unreadable(`"${field}" is not text`)
  return value
}

function textOrNothing (value: unknown): string {
  return typeof value === 'string' ? value : ''
}

function readUsage (value: unknown): Usage | undefined {
  if (!isObject(value)) return undefined
  const prompt = value.prompt_tokens
  const completion = value.completion_tokens
  if (!Number.isInteger(prompt) || !Number.isInteger(completion)) return undefined
  const total = Number.isInteger(value.total_tokens) ? value.total_tokens as number : (prompt as number) + (completion as number)
  const usage: Usage = { prompt_tokens: prompt as number, completion_tokens: completion as number, total_tokens: total }
  // The upstream's own prompt-cache count (OpenAI's field; vLLM and chatd send it too), relayed as given.
  const details = value.prompt_tokens_details
  if (isObject(details) && Number.isInteger(details.cached_tokens)) usage.prompt_tokens_details = { cached_tokens: details.cached_tokens as number }
  // The upstream's count of reasoning tokens, when it reports one, relayed as given.
  const completionDetails = value.completion_tokens_details
  if (isObject(completionDetails) && Number.isInteger(completionDetails.reasoning_tokens)) {
    usage.completion_tokens_details = { reasoning_tokens: completionDetails.reasoning_tokens as number }
  }
  return usage
}

function readTop (value: unknown): TopLogprob | undefined {
  if (!isObject(value) || typeof value.token !== 'string' || typeof value.logprob !== 'number') return undefined
  const bytes = Array.isArray(value.bytes) && value.bytes.every(b => Number.isInteger(b)) ? value.bytes as number[] : null
  return { token: value.token, logprob: value.logprob, bytes }
}

function readTokens (value: unknown): TokenLogprob[] {
  if (!Array.isArray(value)) return []
  const tokens: TokenLogprob[] = []
  for (const item of value) {
    const top = readTop(item)
    if (!top) throw unreadable('a logprobs entry without token and logprob')
    const alternatives = Array.isArray(item.top_logprobs) ? item.top_logprobs.map(readTop).filter((t: TopLogprob | undefined) => t !== undefined) : []
    tokens.push({ ...top, top_logprobs: alternatives })
  }
  return tokens
}

/** A choice's token log-probabilities, relayed as they came (absent or null: none). */
function readLogprobs (value: unknown): DeltaLogprobs | undefined {
  if (value === undefined || value === null) return undefined
  if (!isObject(value)) throw unreadable('"logprobs" is not an object')
  const logprobs = { content: readTokens(value.content), reasoning: readTokens(value.reasoning_content) }
  return logprobs.content.length > 0 || logprobs.reasoning.length > 0 ? logprobs : undefined
}

/** `tool_calls` of a delta (pieces with `index`) or of a message (whole calls, numbered in order). */
function readToolCalls (value: unknown, part: 'delta' | 'message'): ToolCallDelta[] | undefined {
  if (value === undefined || value === null) return undefined
  if (!Array.isArray(value)) throw unreadable('"tool_calls" is not a list')
  const calls = value.map((item: unknown, i): ToolCallDelta => {
    if (!isObject(item)) throw unreadable('a tool call that is not an object')
    const index = part === 'message' ? i : item.index
    if (!Number.isInteger(index) || (index as number) < 0 || (index as number) > MAX_TOOL_CALL_INDEX) throw unreadable('a tool call without a valid index')
    const fn = item.function === undefined || item.function === null ? {} : item.function
    if (!isObject(fn)) throw unreadable('a tool call whose "function" is not an object')
    const call: ToolCallDelta = { index: index as number }
    if (item.id !== undefined && item.id !== null) call.id = optionalText(item.id, 'tool_calls.id')
    if (fn.name !== undefined && fn.name !== null) call.name = optionalText(fn.name, 'tool_calls.function.name')
    if (fn.arguments !== undefined && fn.arguments !== null) call.arguments = optionalText(fn.arguments, 'tool_calls.function.arguments')
    return call
  })
  return calls.length > 0 ? calls : undefined
}

/** One piece from `choices[0]` and `usage` of a chunk or completion; `part` is `delta` or `message`. */
function readPiece (json: unknown, part: 'delta' | 'message'): ReplyPiece {
  if (!isObject(json)) throw unreadable('a JSON value that is not an object')
  if (json.error !== undefined && json.error !== null) throw reportedError()
  const choices = json.choices
  if (!Array.isArray(choices)) throw unreadable('no "choices" list')
  const piece: ReplyPiece = { content: '', reasoning: '', usage: readUsage(json.usage) }
  const choice = choices[0]
  if (choice === undefined) return piece // usage-only chunk
  if (!isObject(choice)) throw unreadable('a choice that is not an object')
  const body = choice[part]
  if (body !== undefined && body !== null) {
    if (!isObject(body)) throw unreadable(`"${part}" is not an object`)
    piece.content = optionalText(body.content, 'content')
    // Lenient here: some providers put structured data (effort settings, detail lists) under these names.
    piece.reasoning = textOrNothing(body.reasoning_content) || textOrNothing(body.reasoning)
    const toolCalls = readToolCalls(body.tool_calls, part)
    if (toolCalls) piece.toolCalls = toolCalls
  }
  const logprobs = readLogprobs(choice.logprobs)
  if (logprobs) piece.logprobs = logprobs
  if (choice.finish_reason !== undefined && choice.finish_reason !== null) {
    if (typeof choice.finish_reason !== 'string') throw unreadable('"finish_reason" is not text')
    piece.finishReason = choice.finish_reason
  }
  if (typeof choice.stop_reason === 'string') piece.stopReason = choice.stop_reason
  return piece
}

/** One SSE data frame of a streamed reply. */
export function readChunk (data: string): ReplyPiece {
  return readPiece(parseJson(data, 'an event'), 'delta')
}

/** A whole, non-streamed reply. */
export function readCompletion (text: string): ReplyPiece {
  const json = parseJson(text, 'a body')
  const piece = readPiece(json, 'message')
  if (((json as Json).choices as unknown[]).length === 0) throw unreadable('no choice in the reply')
  return { ...piece, finishReason: piece.finishReason ?? 'stop' }
}
