// What a chat completion reserves against tokens-per-minute before it runs:
// an estimate of its prompt plus the most it may generate. The estimate is
// deliberately simple and cheap (no tokenizer on the hot path): about four
// characters per token, the usual rule for English text. When the request
// ends, the reservation is replaced by the real prompt + completion count.

export const CHARS_PER_TOKEN = 4

export function estimatePromptTokens (messages: Array<{ content: string }>): number {
  const chars = messages.reduce((n, m) => n + m.content.length, 0)
  return Math.ceil(chars / CHARS_PER_TOKEN)
}
