// Prompt shaping: the client's conversation -> the messages a model sees. Runs
// for every backend, local or upstream:
// 1. Earlier assistant turns lose their thinking (R1's template expects only
//    the answers of earlier turns; clients often send whole replies back).
// 2. The controls' instruction and the search sources become one system text,
//    placed before the conversation and after any system message the client
//    sent. It is appended to the client's (last leading) system message rather
//    than sent as a second one, because templates such as R1's keep only one
//    system message and would drop the other.

import type { ChatMessage } from '../engine/backend.ts'
import { stripThinking } from '../engine/reasoning.ts'

export function stripEarlierThinking (messages: ChatMessage[]): ChatMessage[] {
  return messages.map(m => m.role === 'assistant' ? { role: m.role, content: stripThinking(m.content) } : m)
}

/** Puts `text` before the conversation, after the client's leading system messages. */
export function placeSystemText (messages: ChatMessage[], text: string): ChatMessage[] {
  if (text === '') return messages
  let leading = 0
  while (leading < messages.length && messages[leading].role === 'system') leading++
  if (leading === 0) return [{ role: 'system', content: text }, ...messages]
  const shaped = [...messages]
  const last = shaped[leading - 1]
  shaped[leading - 1] = { role: 'system', content: last.content === '' ? text : `${last.content}\n\n${text}` }
  return shaped
}

/** The whole step: `systemTexts` are the instruction and the sources block, '' where absent. */
export function shapeConversation (messages: ChatMessage[], systemTexts: string[]): ChatMessage[] {
  return placeSystemText(stripEarlierThinking(messages), systemTexts.filter(s => s !== '').join('\n\n'))
}
