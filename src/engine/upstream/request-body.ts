// The body chatd sends upstream for one generation. chatd always asks for a
// stream (one code path, and the idle timeout can tell a stalled reply from a
// slow one) with usage in the last chunk; the client's own `stream` choice is
// served from it either way.

import type { GenerateRequest } from '../backend.ts'

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
}

export function upstreamBody (request: GenerateRequest, model: UpstreamModel): Record<string, unknown> {
  const body: Record<string, unknown> = {
    model: model.upstreamModel,
    messages: request.messages.map(m => ({ role: m.role, content: m.content })),
    stream: true,
    stream_options: { include_usage: true },
    temperature: request.temperature,
    top_p: request.topP,
  }
  if (model.passTopK && request.topK > 0) body.top_k = request.topK
  if (model.passCacheSalt && request.cacheScope !== undefined) body.cache_salt = request.cacheScope
  if (request.maxTokens !== undefined) body.max_tokens = request.maxTokens
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
