// The token budget a `wordcount` sets when the client gave no max_tokens. The
// instruction asks for about N words; the budget is a hard stop well above
// that (TOKENS_PER_WORD covers English at ~1.3 tokens a word and most other
// languages), plus the model's thinking allowance (models.json
// `thinkingBudget`) so a reasoning model is not cut off before it answers.
// When the model's context length is known, the budget is capped to what the
// prompt surely leaves free, so a wordcount never turns into a
// context_length_exceeded refusal.

import type { ChatMessage } from '../engine/backend.ts'

export const TOKENS_PER_WORD = 2
/** Template tokens (role markers, separators) allowed per message when bounding the prompt. */
const TEMPLATE_TOKENS_PER_MESSAGE = 16

export interface BudgetInput {
  wordcount: number
  /** Tokens allowed for thinking on top of the answer (0 for models that do not reason). */
  thinkingBudget: number
  contextLength?: number
  /** The conversation as the model will see it (instruction included). */
  messages: ChatMessage[]
}

/** max_tokens for a wordcount; undefined when the prompt leaves no room to promise anything. */
export function wordcountBudget (input: BudgetInput): number | undefined {
  const budget = Math.ceil(input.wordcount * TOKENS_PER_WORD) + input.thinkingBudget
  if (input.contextLength === undefined) return budget
  const room = input.contextLength - promptTokensAtMost(input.messages)
  return room >= 1 ? Math.min(budget, room) : undefined
}

/** An upper bound on the prompt's tokens: byte-level tokenizers never produce more tokens than UTF-8 bytes. */
function promptTokensAtMost (messages: ChatMessage[]): number {
  return messages.reduce((n, m) => n + Buffer.byteLength(m.content, 'utf8') + TEMPLATE_TOKENS_PER_MESSAGE, 0)
}
