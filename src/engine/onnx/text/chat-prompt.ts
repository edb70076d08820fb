/**
 * A conversation to prompt token ids: the chat template renders the messages and the tokenizer
 * encodes the result, with the messages quoted first (content-quoting.ts) so that only the
 * template's own control tokens become control-token ids. Text a client sends, including text
 * that spells `</s>` or `<｜User｜>`, always reaches the model as ordinary text.
 */
import type { ChatMessage } from '../../backend.ts'
import type { ChatTemplate } from './chat-template.ts'
import { toolFormatForTemplate } from '../../tools/format.ts'
import { hasToolTurns, renderToolTurns } from './tool-turns.ts'
import type { TextTokenizer } from './tokenizer.ts'

export interface EncodedPrompt {
  ids: number[]
  /** The template left the prompt inside an open `<think>` block (chat-template.ts). */
  endsInThink: boolean
}

/** With `maxTokens`, throws PromptTooLong once the prompt is shown to need more (tokenizer.ts). */
export function encodeChatPrompt (
  template: ChatTemplate,
  tokenizer: TextTokenizer,
  messages: readonly ChatMessage[],
  maxTokens?: number
): EncodedPrompt {
  const quote = (text: string): string => tokenizer.quoting.quote(text)
  // Rendered from quoted text, the `<think>` check sees only what the template wrote.
  const rendered = hasToolTurns(messages)
    ? renderToolTurns(template, toolFormatForTemplate(template.source), messages, quote)
    : template.render(messages.map(m => ({ role: m.role, content: quote(m.content) })))
  // The template writes BOS itself; the encoder adds no special tokens of its own.
  return { ids: tokenizer.encodeQuoted(rendered.text, maxTokens), endsInThink: rendered.endsInThink }
}
