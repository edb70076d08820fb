// Turns a call the model wrote in its answer into tool calls (tool_choice "auto" on a backend
// that prompts for tools). The answer's text passes through until the family's call start
// appears (a tail that could still become it is held back); from there the text is kept. When
// the model stops, the kept text becomes tool calls if it is only well-formed calls of declared
// tools with JSON-object arguments (the reply then finishes with "tool_calls"); otherwise it goes
// out as the text it is. Thinking is never parsed: only the answer can call.

import { randomBytes } from 'node:crypto'
import type { DeltaLogprobs, GenerateEvent, ToolDefinition } from '../backend.ts'
import type { ToolCallFormat } from './format.ts'

export interface CallParsing {
  format: ToolCallFormat
  tools: ToolDefinition[]
  /** false: only the first of several calls is kept. */
  parallel: boolean
}

/** An id in OpenAI's shape. */
export function newToolCallId (): string {
  return 'call_' + randomBytes(12).toString('base64url')
}

/** The length of the longest end of `text` that is a start of `word` (and not all of it). */
export function partialTail (text: string, word: string): number {
  for (let n = Math.min(text.length, word.length - 1); n > 0; n--) {
    if (word.startsWith(text.slice(text.length - n))) return n
  }
  return 0
}

export async function * parseToolCalls (events: AsyncIterable<GenerateEvent>, opts: CallParsing): AsyncGenerator<GenerateEvent> {
  const start = opts.format.callStart
  const declared = new Set(opts.tools.map(t => t.function.name))
  let pending = ''
  let kept: string | undefined
  const keptLogprobs: DeltaLogprobs = { content: [], reasoning: [] }
  for await (const event of events) {
    if (event.type === 'finish') {
      if (kept === undefined) {
        if (pending !== '') yield { type: 'delta', content: pending }
        yield event
        return
      }
      const written = event.reason === 'stop' ? opts.format.parse(kept) : undefined
      const calls = written?.every(c => declared.has(c.name)) ? (opts.parallel ? written : written.slice(0, 1)) : undefined
      const logprobs = keptLogprobs.content.length > 0 ? { logprobs: keptLogprobs } : {}
      if (calls === undefined) {
        yield { type: 'delta', content: kept, ...logprobs }
        yield event
        return
      }
      for (const [index, call] of calls.entries()) {
        yield { type: 'delta', toolCalls: [{ index, id: newToolCallId(), name: call.name, arguments: '' }], ...(index === 0 ? logprobs : {}) }
        yield { type: 'delta', toolCalls: [{ index, arguments: call.arguments }] }
      }
      yield { type: 'finish', reason: 'tool_calls', usage: event.usage, ...(event.timings ? { timings: event.timings } : {}) }
      return
    }
    if (kept !== undefined) {
      kept += event.content ?? ''
      if (event.logprobs) keptLogprobs.content.push(...event.logprobs.content)
      if (event.reasoning || (event.logprobs && event.logprobs.reasoning.length > 0)) {
        yield { type: 'delta', reasoning: event.reasoning, ...(event.logprobs ? { logprobs: { content: [], reasoning: event.logprobs.reasoning } } : {}) }
      }
      continue
    }
    const text = pending + (event.content ?? '')
    const at = text.indexOf(start)
    let out: string
    if (at >= 0) {
      out = text.slice(0, at)
      kept = text.slice(at)
      pending = ''
    } else {
      const hold = partialTail(text, start)
      out = text.slice(0, text.length - hold)
      pending = text.slice(text.length - hold)
    }
    const passed: GenerateEvent = { ...event }
    if (out === '') delete passed.content
    else passed.content = out
    if (passed.content !== undefined || passed.reasoning || passed.logprobs) yield passed
  }
}
