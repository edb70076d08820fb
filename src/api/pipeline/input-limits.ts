// Size limits on a request's conversation, beyond the body size (BODY_LIMIT,
// 413): how many messages, how long one message, how long the tools'
// definitions. Each refusal is a 400 invalid_parameter naming the field and the
// setting that allows more, checked before any other work. How many parts or
// blocks one message may have (MAX_CONTENT_PARTS) is each door's to check: the
// door joins them into the message's one text.
//
// BODY_LIMIT alone bounds the bytes, not the work: a 1 MiB body holds ~36,000
// empty messages (each one a pass through prompt shaping and the template) or
// one unbroken 1 MiB string, which the BPE tokenizer takes seconds to encode
// on the model's thread while every other stream of that model waits. The
// defaults are far above what a real conversation needs and small enough to
// keep one request's share of that work bounded.

import { invalidParam } from '../../errors.ts'
import type { InputLimits } from '../../config.ts'
import { fields } from './fields.ts'
import { TOOLS_MAX, type CompletionRequest } from './request.ts'

// The limits and their defaults are settings (config.ts).
export { DEFAULT_INPUT_LIMITS, type InputLimits } from '../../config.ts'

/** Throws 400 invalid_parameter for the first field over its limit. */
export function checkInputLimits (req: CompletionRequest, limits: InputLimits): void {
  if (req.messages.length > limits.maxMessages) {
    throw invalidParam('messages', `Too many messages: ${req.messages.length}; at most ${limits.maxMessages} are accepted (MAX_MESSAGES).`)
  }
  req.messages.forEach((message, i) => {
    // A tool call's name and arguments reach the prompt as the message's text does.
    const calls = (message.toolCalls ?? []).reduce((n, call) => n + codePoints(call.function.name) + codePoints(call.function.arguments), 0)
    const chars = calls + codePoints(message.content)
    if (chars > limits.maxMessageChars) {
      const withCalls = calls > 0 ? ' (with its tool calls\' names and arguments)' : ''
      throw invalidParam(fields.message(i, calls > 0 ? 'tool_calls' : 'content'), `The message is ${chars} characters long${withCalls}; at most ${limits.maxMessageChars} are accepted (MAX_MESSAGE_CHARS).`)
    }
  })
  checkToolLimits(req, limits)
}

/** JSON Schemas nested deeper than this are refused: no real tool needs it, and compiling or rendering it is work. */
export const TOOL_SCHEMA_DEPTH_MAX = 16

/** The tools' definitions reach the prompt (or the upstream) whole: together they count as one message. */
function checkToolLimits (req: CompletionRequest, limits: InputLimits): void {
  const tools = req.tools ?? []
  // Before the request's schema (request.ts) bounds the array: a Responses namespace's functions
  // each become a tool, and this message counts them so.
  if (tools.length > TOOLS_MAX) {
    throw invalidParam('tools', `Too many tools: ${tools.length} functions (a namespace's each counted); at most ${TOOLS_MAX} are accepted.`)
  }
  let chars = 0
  tools.forEach((tool, i) => {
    const depth = jsonDepth(tool.function.parameters)
    if (depth > TOOL_SCHEMA_DEPTH_MAX) {
      throw invalidParam(fields.tool(i, 'parameters'), `The schema is nested ${depth} levels deep; at most ${TOOL_SCHEMA_DEPTH_MAX} are accepted.`)
    }
    chars += codePoints(JSON.stringify(tool.function))
  })
  if (chars > limits.maxMessageChars) {
    throw invalidParam('tools', `The tools' definitions are ${chars} characters long; at most ${limits.maxMessageChars} are accepted (MAX_MESSAGE_CHARS).`)
  }
}

/** Nesting depth of a JSON value (a scalar is 0), without recursion. */
function jsonDepth (value: unknown): number {
  let max = 0
  const stack: Array<[unknown, number]> = [[value, 0]]
  for (let item = stack.pop(); item !== undefined; item = stack.pop()) {
    const [v, d] = item
    if (typeof v !== 'object' || v === null) continue
    max = Math.max(max, d + 1)
    for (const child of Object.values(v)) stack.push([child, d + 1])
  }
  return max
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
