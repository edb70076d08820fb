// Token counts for upstreams that report none (chatd asks for them with
// stream_options.include_usage, but not every server honours it). chatd has
// no tokenizer for an upstream model, so it estimates, the same way every time:
// - completion tokens: the number of streamed deltas that carried text, since
//   OpenAI-compatible servers (vLLM, llama.cpp, Ollama, chatd) send one per
//   token; for a reply that came as one JSON body, characters / 4;
// - prompt tokens: characters / 4 of every message, plus 4 per message for
//   the template's role markers (OpenAI's rule of thumb for English text).

import type { ChatMessage } from '../backend.ts'

export const CHARS_PER_TOKEN = 4
export const TOKENS_PER_MESSAGE = 4

export function estimateTokens (text: string): number {
  return Math.ceil(text.length / CHARS_PER_TOKEN)
}

export function estimatePromptTokens (messages: ChatMessage[]): number {
  return messages.reduce((n, m) => n + estimateTokens(m.content) + TOKENS_PER_MESSAGE, 0)
}
