// Reading an upstream's JSON, shared by every wire (reply.ts for chat completions,
// wire-responses.ts, wire-messages.ts): what it parses to, and the one failure for text
// that is not JSON.

import { unreadable } from './failures.ts'

export type Json = Record<string, unknown>

export function isObject (value: unknown): value is Json {
  return typeof value === 'object' && value !== null && !Array.isArray(value)
}

/** An upstream's JSON text (`what`: an event, a body), or the unreadable-reply failure saying it is none. */
export function parseJson (text: string, what: 'an event' | 'a body'): unknown {
  try {
    return JSON.parse(text)
  } catch {
    throw unreadable(`${what} that is not JSON`)
  }
}
