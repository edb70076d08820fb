// The search query for a conversation: the last user message, whitespace
// collapsed, cut at a word boundary to a length every provider accepts
// (Brave takes 400 characters, Google about 2,000 bytes of URL).

import type { ChatMessage } from '../engine/backend.ts'
import { invalidParam } from '../errors.ts'

export const MAX_QUERY_CHARS = 300

export function searchQuery (messages: ChatMessage[]): string {
  const last = messages.findLast(m => m.role === 'user')
  const text = (last?.content ?? '').replace(/\s+/g, ' ').trim()
  if (text === '') throw invalidParam('messages', 'A web search needs a user message with text to search for.')
  if (text.length <= MAX_QUERY_CHARS) return text
  const cut = text.slice(0, MAX_QUERY_CHARS + 1)
  const space = cut.lastIndexOf(' ')
  return (space > MAX_QUERY_CHARS / 2 ? cut.slice(0, space) : cut.slice(0, MAX_QUERY_CHARS)).trim()
}
