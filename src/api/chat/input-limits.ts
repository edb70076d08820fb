// Size limits on a chat request's conversation, beyond the body size
// (BODY_LIMIT, 413): how many messages, how long one message, how many content
// parts one message may have. Each refusal is a 400 invalid_parameter naming the
// field and the setting that allows more, checked before any other work.
//
// BODY_LIMIT alone bounds the bytes, not the work: a 1 MiB body holds ~36,000
// empty messages (each one a pass through prompt shaping and the template) or
// one unbroken 1 MiB string, which the BPE tokenizer takes seconds to encode
// on the model's thread while every other stream of that model waits. The
// defaults are far above what a real conversation needs and small enough to
// keep one request's share of that work bounded.

import { invalidParam } from '../../errors.ts'
import type { InputLimits } from '../../config.ts'
import type { ChatCompletionRequest } from './schema.ts'

// The limits and their defaults are settings (config.ts).
export { DEFAULT_INPUT_LIMITS, type InputLimits } from '../../config.ts'

/** Throws 400 invalid_parameter for the first field over its limit. */
export function checkInputLimits (body: ChatCompletionRequest, limits: InputLimits): void {
  if (body.messages.length > limits.maxMessages) {
    throw invalidParam('messages', `Too many messages: ${body.messages.length}; at most ${limits.maxMessages} are accepted (MAX_MESSAGES).`)
  }
  body.messages.forEach((message, i) => {
    const content = message.content
    if (typeof content !== 'string' && content.length > limits.maxContentParts) {
      throw invalidParam(`messages[${i}].content`, `Too many content parts: ${content.length}; at most ${limits.maxContentParts} per message are accepted (MAX_CONTENT_PARTS).`)
    }
    const chars = typeof content === 'string' ? codePoints(content) : content.reduce((n, part) => n + codePoints(part.text), 0)
    if (chars > limits.maxMessageChars) {
      throw invalidParam(`messages[${i}].content`, `The message is ${chars} characters long; at most ${limits.maxMessageChars} are accepted (MAX_MESSAGE_CHARS).`)
    }
  })
}

/** Length in Unicode code points: a surrogate pair (an emoji) is one character. */
export function codePoints (text: string): number {
  let pairs = 0
  for (let i = 0; i < text.length - 1; i++) {
    const unit = text.charCodeAt(i)
    if (unit >= 0xd800 && unit <= 0xdbff) {
      const next = text.charCodeAt(i + 1)
      if (next >= 0xdc00 && next <= 0xdfff) {
        pairs++
        i++
      }
    }
  }
  return text.length - pairs
}
