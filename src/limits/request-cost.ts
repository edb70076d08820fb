// What a chat completion reserves against tokens-per-minute before it runs:
// an estimate of its prompt plus the most it may generate. The estimate is
// deliberately simple and cheap (no tokenizer on the hot path): the prompt's
// characters divided by the model's characters per token, measured once per
// local model on a sample shaped like today's prompts (engine/chars-per-token.ts:
// about 4.3 for the R1 distill's tokenizer, about 1 for a 512-token one), or
// four, the usual rule for English, where nothing was measured (an upstream).
// When the request ends, the reservation is replaced by the real prompt +
// completion count.

export const CHARS_PER_TOKEN = 4

export function estimatePromptTokens (messages: Array<{ content: string }>, charsPerToken = CHARS_PER_TOKEN): number {
  return estimateTokensOfChars(messages.reduce((n, m) => n + m.content.length, 0), charsPerToken)
}

/** Tokens of `chars` characters of prompt. */
export function estimateTokensOfChars (chars: number, charsPerToken = CHARS_PER_TOKEN): number {
  return Math.ceil(chars / charsPerToken)
}
