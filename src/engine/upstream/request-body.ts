// The body chatd sends upstream for one generation. chatd always asks for a
// stream (one code path, and the idle timeout can tell a stalled reply from a
// slow one) with usage in the last chunk; the client's own `stream` choice is
// served from it either way.

import type { ChatMessage, GenerateRequest } from '../backend.ts'

export interface UpstreamModel {
  /** The model's name on the upstream. */
  upstreamModel: string
  /** Send top_k (vLLM, llama.cpp, Ollama and chatd accept it; OpenAI's API rejects it). */
  passTopK: boolean
  /**
   * Send the request's cache scope as `cache_salt` (vLLM), so the upstream's prefix cache is
   * split by account as chatd's own is; without it, the upstream's cached_tokens are not relayed.
   */
  passCacheSalt?: boolean
  /** Send the token cap as max_completion_tokens (OpenAI's own API: its reasoning models refuse max_tokens). */
  maxCompletionTokens?: boolean
}

/** Whether the cap goes as max_completion_tokens: as models.json says, else for OpenAI's own API's host. */
export function sendsMaxCompletionTokens (endpoint: URL, configured: boolean | undefined): boolean {
  return configured ?? endpoint.hostname === 'api.openai.com'
}

/** A message as OpenAI's API takes it: tool calls and tool results in their own fields. */
function upstreamMessage (m: ChatMessage): Record<string, unknown> {
  if (m.role === 'tool') return { role: 'tool', tool_call_id: m.toolCallId, content: m.content }
  if (m.toolCalls && m.toolCalls.length > 0) return { role: m.role, content: m.content === '' ? null : m.content, tool_calls: m.toolCalls }
  return { role: m.role, content: m.content }
}

export function upstreamBody (request: GenerateRequest, model: UpstreamModel): Record<string, unknown> {
  const body: Record<string, unknown> = {
    model: model.upstreamModel,
    messages: request.messages.map(upstreamMessage),
    stream: true,
    stream_options: { include_usage: true },
  }
  // Only what the client sent: the upstream's own defaults apply to the rest.
  const sent = request.clientSampling ?? { temperature: true, topP: true, topK: true }
  if (sent.temperature) body.temperature = request.temperature
  if (sent.topP) body.top_p = request.topP
  if (model.passTopK && sent.topK && request.topK > 0) body.top_k = request.topK
  if (model.passCacheSalt && request.cacheScope !== undefined) body.cache_salt = request.cacheScope
  if (request.maxTokens !== undefined) body[model.maxCompletionTokens ? 'max_completion_tokens' : 'max_tokens'] = request.maxTokens
  // Passed on as given; the upstream applies (or refuses) them.
  if (request.presencePenalty !== undefined) body.presence_penalty = request.presencePenalty
  if (request.frequencyPenalty !== undefined) body.frequency_penalty = request.frequencyPenalty
  if (request.logitBias !== undefined) body.logit_bias = request.logitBias
  if (request.minP !== undefined) body.min_p = request.minP
  if (request.reasoningEffort !== undefined) body.reasoning_effort = request.reasoningEffort
  if (request.tools && request.tools.length > 0) body.tools = request.tools
  if (request.toolChoice !== undefined) body.tool_choice = request.toolChoice
  if (request.parallelToolCalls !== undefined) body.parallel_tool_calls = request.parallelToolCalls
  if (request.seed !== undefined) body.seed = request.seed
  if (request.stop.length > 0) body.stop = request.stop
  // Passed on as the client sent them; the upstream applies them and its reply is relayed.
  if (request.logprobs) {
    body.logprobs = true
    if (request.topLogprobs !== undefined) body.top_logprobs = request.topLogprobs
  }
  if (request.responseFormat !== undefined) body.response_format = request.responseFormat
  return body
}
