// The operator's shared prefix (PREFIX_CACHE_SHARED_PREFIX): a system prompt
// every account sends, whose cache every account may reuse. Its token ids are
// those that every prompt opening with it shares, so a prompt may reuse the
// shared entry only when its tokens start exactly so.
import type { ChatMessage } from '../../backend.ts'

export interface SharedPrefix {
  /** The system prompt's text, exactly as the model sees it. */
  text: string
  /** Where the model takes it (models.json `systemPrompt`): a system message, or the start of the first user turn. */
  placement?: 'system' | 'user'
}

/**
 * The ids every prompt opening with the shared text shares: the conversation rendered with each
 * of two different user messages after it, and the ids the two have in common. Empty when the
 * text is empty or the template cannot render it.
 */
export function sharedPrefixIds (prefix: SharedPrefix, encode: (messages: ChatMessage[]) => number[]): number[] {
  if (prefix.text === '') return []
  // The prompt shaping's forms (src/prompt/shape.ts): a system message, or the first user turn's opening paragraph.
  const opening = (ask: string): ChatMessage[] => prefix.placement === 'user'
    ? [{ role: 'user', content: `${prefix.text}\n\n${ask}` }]
    : [{ role: 'system', content: prefix.text }, { role: 'user', content: ask }]
  let a: number[]
  let b: number[]
  try {
    a = encode(opening('A'))
    b = encode(opening('B'))
  } catch {
    return []
  }
  let shared = 0
  while (shared < a.length && shared < b.length && a[shared] === b[shared]) shared++
  return a.slice(0, shared)
}
