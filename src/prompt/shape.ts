// Prompt shaping: the client's conversation -> the messages a model sees. Runs
// for every backend, local or upstream:
// 1. Earlier assistant turns lose their thinking (R1's template expects only
//    the answers of earlier turns; clients often send whole replies back).
// 2. The controls' instruction and the search sources become one system text,
//    placed before the conversation and after any system message the client
//    sent. It is appended to the client's (last leading) system message rather
//    than sent as a second one, because templates such as R1's keep only one
//    system message and would drop the other.
//    Models whose authors advise against a system prompt (DeepSeek's R1
//    distills: "all instructions should be contained within the user prompt")
//    get that text, and any system message the client sent, at the start of
//    the first user turn instead (models.json `systemPrompt: "user"`).

import type { ChatMessage } from '../engine/backend.ts'
import { stripThinking } from '../engine/reasoning.ts'

export function stripEarlierThinking (messages: ChatMessage[]): ChatMessage[] {
  return messages.map(m => m.role === 'assistant' ? { ...m, content: stripThinking(m.content) } : m)
}

/**
 * A finished reply's shaped conversation as the next turn's shaped request starts: the shaped
 * messages, then the reply as an earlier assistant turn (without its thinking). Shaping touches
 * only the leading system messages or the first user turn, and strips earlier turns' thinking,
 * so shaping the next turn's whole conversation gives these messages first.
 */
export function nextTurnStart (shaped: ChatMessage[], reply: string): ChatMessage[] {
  return [...shaped, { role: 'assistant', content: stripThinking(reply) }]
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

/**
 * Moves every system message, then `text`, to the start of the first user turn (a user turn of
 * its own at the start when there is none), in order, separated by blank lines.
 */
export function placeInFirstUserTurn (messages: ChatMessage[], text: string): ChatMessage[] {
  const system = [...messages.filter(m => m.role === 'system').map(m => m.content), text].filter(s => s !== '')
  const rest = messages.filter(m => m.role !== 'system')
  if (system.length === 0) return rest
  const first = rest.findIndex(m => m.role === 'user')
  if (first < 0) return [{ role: 'user', content: system.join('\n\n') }, ...rest]
  const shaped = [...rest]
  shaped[first] = { ...rest[first], role: 'user', content: [...system, rest[first].content].filter(s => s !== '').join('\n\n') }
  return shaped
}

/** Where a model takes instructions: a system message, or the first user turn (models.json `systemPrompt`). */
export type SystemPromptPlacement = 'system' | 'user'

/** The whole step: `systemTexts` are the instruction and the sources block, '' where absent. */
export function shapeConversation (messages: ChatMessage[], systemTexts: string[], placement: SystemPromptPlacement = 'system'): ChatMessage[] {
  const text = systemTexts.filter(s => s !== '').join('\n\n')
  const conversation = stripEarlierThinking(messages)
  return placement === 'user' ? placeInFirstUserTurn(conversation, text) : placeSystemText(conversation, text)
}
