// Turns the answer of a forced call (tool_choice `required` or a named tool: the engine writes
// the family's form by construction, forced-call.ts) into tool-call deltas as it is generated:
// the id and name once the opening and the name are written, then the arguments' text as it
// comes (a tail that could start the closing held back), and finish_reason "tool_calls" when the
// call is complete: closed, or cut by max_tokens after its arguments were whole (the closing is
// only the form's; the call itself is all there, so it is a call, not a reply cut short). Whole
// and streamed replies are made of the same deltas, so they assemble alike. An answer not in the
// form (never expected) goes out as text; one cut short inside its arguments keeps its
// finish_reason, after the arguments written so far.

import type { DeltaLogprobs, GenerateEvent, ToolDefinition } from '../backend.ts'
import { newToolCallId, partialTail } from './call-parser.ts'
import type { ToolCallFormat } from './format.ts'

/**
 * The arguments of a call cut before its closing was written, when they are whole: the text up to
 * where the closing began (or all of it, when what looked like the closing's start is the
 * arguments' own last brace) parses as a JSON object. The grammar wrote them, so an object that
 * parses is one it had finished. Undefined while they are incomplete.
 */
function wholeArguments (args: string, close: string): string | undefined {
  for (const candidate of new Set([args.slice(0, args.length - partialTail(args, close)), args])) {
    try {
      const value: unknown = JSON.parse(candidate)
      if (typeof value === 'object' && value !== null && !Array.isArray(value)) return candidate
    } catch {}
  }
  return undefined
}

export async function * streamForcedCall (events: AsyncIterable<GenerateEvent>, opts: { format: ToolCallFormat; tools: ToolDefinition[] }): AsyncGenerator<GenerateEvent> {
  const { open, afterName, close } = opts.format.forced
  const heads = opts.tools.map(t => ({ name: t.function.name, text: open + t.function.name + afterName }))
  /** The answer so far. */
  let answer = ''
  /** Where the arguments start in `answer`, once the head is written; how much of them went out. */
  let argsAt = -1
  let sent = 0
  let closed = false
  const held: DeltaLogprobs = { content: [], reasoning: [] }
  for await (const event of events) {
    if (event.type === 'finish') {
      if (argsAt < 0) {
        // Never in the form: the text as it is.
        if (answer !== '') yield { type: 'delta', content: answer, ...(held.content.length > 0 ? { logprobs: held } : {}) }
        yield event
        return
      }
      const whole = closed ? undefined : wholeArguments(answer.slice(argsAt), close)
      const rest = closed ? '' : (whole ?? answer.slice(argsAt)).slice(sent)
      if (rest !== '') yield { type: 'delta', toolCalls: [{ index: 0, arguments: rest }] }
      const complete = (closed || whole !== undefined) && (event.reason === 'stop' || event.reason === 'length')
      yield complete ? { type: 'finish', reason: 'tool_calls', usage: event.usage, ...(event.timings ? { timings: event.timings } : {}) } : event
      return
    }
    if (event.reasoning || (event.logprobs && event.logprobs.reasoning.length > 0)) {
      yield { type: 'delta', reasoning: event.reasoning, ...(event.logprobs ? { logprobs: { content: [], reasoning: event.logprobs.reasoning } } : {}) }
    }
    if (event.logprobs) held.content.push(...event.logprobs.content)
    if (!event.content || closed) continue
    answer += event.content
    const out: GenerateEvent = { type: 'delta', toolCalls: [] }
    if (argsAt < 0) {
      const head = heads.find(h => answer.startsWith(h.text))
      if (!head) continue
      argsAt = head.text.length
      out.toolCalls?.push({ index: 0, id: newToolCallId(), name: head.name, arguments: '' })
    }
    const args = answer.slice(argsAt)
    const end = args.indexOf(close)
    if (end >= 0) closed = true
    const upTo = end >= 0 ? end : args.length - partialTail(args, close)
    if (upTo > sent) {
      out.toolCalls?.push({ index: 0, arguments: args.slice(sent, upTo) })
      sent = upTo
    }
    if (out.toolCalls?.length === 0) continue
    if (held.content.length > 0) {
      out.logprobs = { content: held.content.splice(0), reasoning: [] }
    }
    yield out
  }
}
