// Turns a validated request body into what a backend sees. Checks that the
// schema cannot express (n, search) live here too, so the route stays a wiring
// diagram.

import type { GenerateRequest } from '../../engine/backend.ts'
import { ApiError, invalidParam } from '../../errors.ts'
import { DEFAULTS, type ChatCompletionRequest } from './schema.ts'

export function toGenerateRequest (body: ChatCompletionRequest): GenerateRequest {
  if (body.n !== undefined && body.n !== null && body.n !== 1) {
    throw invalidParam('n', 'Only n=1 is supported.')
  }
  if (body.googleSearchStatus) {
    // Search providers are configured by a later issue; until one is, refuse
    // rather than silently answer without search (DESIGN.md "Request controls").
    throw new ApiError('search_unavailable', 'googleSearchStatus is true but no search provider is configured on this server.', { param: 'googleSearchStatus' })
  }

  // The model sees exactly the client's conversation. language, tone and
  // wordcount are validated by the schema; turning non-default values into a
  // system instruction is the prompt-shaping issue's job (src/prompt/).
  const messages = body.messages.map(m => ({
    role: m.role,
    content: typeof m.content === 'string' ? m.content : m.content.map(part => part.text).join(''),
  }))

  const maxTokens = body.max_completion_tokens ?? body.max_tokens ?? undefined
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
  }
}
