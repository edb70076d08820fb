// chatd's own completion request: what each door's body becomes (chat/to-request.ts,
// responses/to-request.ts, messages/to-request.ts) and all the pipeline reads. No
// door's wire details: content is one string (the door joins its parts or
// blocks), one reply cap, stop a list, no nulls; a field left out is one the
// client did not set (a relay sends only those, the local engine uses DEFAULTS).
// `start` checks every request against this schema, so a door's translation
// meets the same bounds as the chat body; a refusal names the neutral field
// (fields.ts), which the door's table renames.

import { Type, type Static } from 'typebox'
import { Compile } from 'typebox/compile'
import type { ResponseFormat, ToolChoice, ToolDefinition } from '../../engine/backend.ts'
import { FieldError, type FieldNames } from './fields.ts'

/** The spec's defaults (service-interface.md 2.1): the chat schema documents and applies them, the pipeline falls back to them. */
export const DEFAULTS = {
  language: 'English',
  tone: 'Default',
  wordcount: 'Default',
  googleSearchStatus: false,
  stream: false,
  temperature: 1,
  top_p: 1,
  top_k: 0,
} as const

/** The largest wordcount (the spec's range is 1 to 100000). */
export const WORDCOUNT_MAX = 100000
/** The most tool calls one assistant message may carry, and tools one request may declare. */
export const TOOL_CALLS_MAX = 128
export const TOOLS_MAX = 128
/** Tool call ids: OpenAI's are about 30 characters; frameworks make their own. */
export const TOOL_CALL_ID_MAX = 256
/** The most entries a logit bias may have. */
export const LOGIT_BIAS_MAX = 300
/** The most alternatives top log-probabilities may ask for. */
export const TOP_LOGPROBS_MAX = 20
/** The longest cache salt. */
export const CACHE_SALT_MAX = 256
/** The most stop strings (every backend honours four). */
export const STOP_MAX = 4
/**
 * The longest tool name: a Responses namespace's function is offered as `namespace__name` (64 + 2
 * + 64), Anthropic's names run to 128; each door bounds its own names, this bounds them all.
 */
export const TOOL_NAME_MAX = 130

const ToolName = Type.String({ minLength: 1, maxLength: TOOL_NAME_MAX, pattern: '^[A-Za-z0-9_-]+$' })
const ToolCallId = Type.String({ minLength: 1, maxLength: TOOL_CALL_ID_MAX })

const ToolCall = Type.Object({
  id: ToolCallId,
  type: Type.Literal('function'),
  function: Type.Object({ name: ToolName, arguments: Type.String() }),
})

const Message = Type.Object({
  role: Type.Enum(['system', 'developer', 'user', 'assistant', 'tool']),
  /** The text; '' on an assistant turn that is only tool calls. */
  content: Type.String(),
  toolCalls: Type.Optional(Type.Array(ToolCall, { maxItems: TOOL_CALLS_MAX })),
  /** A tool message: the id of the call it answers. */
  toolCallId: Type.Optional(ToolCallId),
})

// A tool's description is bounded with the rest of the tools' definitions (MAX_MESSAGE_CHARS,
// input-limits.ts): agents' descriptions run to several thousand characters.
const Tool = Type.Object({
  type: Type.Literal('function'),
  function: Type.Object({
    name: ToolName,
    description: Type.Optional(Type.String()),
    parameters: Type.Optional(Type.Object({}, { additionalProperties: true })),
    strict: Type.Optional(Type.Boolean()),
  }),
})

const ToolChoice = Type.Union([
  Type.Enum(['auto', 'none', 'required']),
  Type.Object({ type: Type.Literal('function'), function: Type.Object({ name: ToolName }) }),
])

const ResponseFormat = Type.Union([
  Type.Object({ type: Type.Literal('text') }),
  Type.Object({ type: Type.Literal('json_object') }),
  Type.Object({
    type: Type.Literal('json_schema'),
    json_schema: Type.Object({
      name: Type.String({ minLength: 1, maxLength: 64, pattern: '^[A-Za-z0-9_-]+$' }),
      description: Type.Optional(Type.String()),
      schema: Type.Optional(Type.Object({}, { additionalProperties: true })),
      strict: Type.Optional(Type.Boolean()),
    }),
  }),
])

const ShortName = Type.String({ minLength: 1, maxLength: 64 })
const Penalty = Type.Number({ minimum: -2, maximum: 2 })

export const CompletionRequestSchema = Type.Object({
  model: Type.String({ minLength: 1 }),
  messages: Type.Array(Message, { minItems: 1 }),
  /** Whether the reply is streamed (the metrics and the trace record it). */
  stream: Type.Optional(Type.Boolean()),

  // The controls (service-interface.md 2.1): shaped into the prompt (src/prompt/).
  language: Type.Optional(ShortName),
  tone: Type.Optional(ShortName),
  wordcount: Type.Optional(Type.Union([Type.Literal('Default'), Type.Integer({ minimum: 1, maximum: WORDCOUNT_MAX })])),
  /** Enrich the reply with a web search run before it (googleSearchStatus). */
  search: Type.Optional(Type.Boolean()),

  // Sampling; absent: the client did not set it.
  temperature: Type.Optional(Type.Number({ minimum: 0, maximum: 2 })),
  topP: Type.Optional(Type.Number({ minimum: 0, maximum: 1 })),
  topK: Type.Optional(Type.Integer({ minimum: 0 })),
  minP: Type.Optional(Type.Number({ minimum: 0, maximum: 1 })),
  seed: Type.Optional(Type.Integer()),
  presencePenalty: Type.Optional(Penalty),
  frequencyPenalty: Type.Optional(Penalty),
  /** Token id (decimal) -> bias; the ids' form is checked in generate-request.ts, naming the key. */
  logitBias: Type.Optional(Type.Record(Type.String(), Type.Number({ minimum: -100, maximum: 100 }), { maxProperties: LOGIT_BIAS_MAX })),

  /** The reply's token cap (thinking included); absent: none asked (the wordcount or the tier may set one). */
  maxTokens: Type.Optional(Type.Integer({ minimum: 1 })),
  stop: Type.Optional(Type.Array(Type.String({ minLength: 1 }), { maxItems: STOP_MAX })),
  logprobs: Type.Optional(Type.Boolean()),
  topLogprobs: Type.Optional(Type.Integer({ minimum: 0, maximum: TOP_LOGPROBS_MAX })),
  reasoningEffort: Type.Optional(Type.Enum(['none', 'minimal', 'low', 'medium', 'high'])),
  responseFormat: Type.Optional(ResponseFormat),

  tools: Type.Optional(Type.Array(Tool, { maxItems: TOOLS_MAX })),
  toolChoice: Type.Optional(ToolChoice),
  parallelToolCalls: Type.Optional(Type.Boolean()),

  /** Narrows the account's prefix cache (cache-scope.ts). */
  cacheSalt: Type.Optional(Type.String({ minLength: 1, maxLength: CACHE_SALT_MAX, pattern: '^[\\x20-\\x7e]+$' })),
  /** Choices asked for; only 1 is served. */
  n: Type.Optional(Type.Integer()),
  /** The end user's id: accepted, not used. */
  user: Type.Optional(Type.String({ maxLength: 256 })),
})

type Schema = Static<typeof CompletionRequestSchema>
export type CompletionMessage = Schema['messages'][number]
/** The request; its tools, tool choice and response format are the engine's types as they are. */
export type CompletionRequest = Omit<Schema, 'tools' | 'toolChoice' | 'responseFormat'> & {
  tools?: ToolDefinition[]
  toolChoice?: ToolChoice
  responseFormat?: ResponseFormat
}

const checker = Compile(CompletionRequestSchema)

/** The neutral field of a place in the request (`/messages/3/toolCalls/0/function/name` -> `messages[3].tool_calls[0].name`). */
export function fieldAt (pointer: string): string {
  let field = ''
  for (const segment of pointer.split('/').slice(1)) {
    if (/^\d+$/.test(segment)) {
      field += `[${segment}]`
      continue
    }
    // The `function` level of a tool and of a tool call is the engine's shape, not a field of its own.
    if (segment === 'function' && /(?:^tools|\.tool_calls)\[\d+\]$/.test(field)) continue
    field += (field === '' ? '' : '.') + segment.replace(/[A-Z]/g, c => `_${c.toLowerCase()}`)
    // A map's keys (logit_bias's token ids) are not fields.
    if (field === 'logit_bias') break
  }
  return field
}

/**
 * Checks a door's request against the bounds every request has (the chat body's): 400
 * invalid_parameter naming the first field out of them.
 */
export function checkCompletionRequest (request: CompletionRequest): void {
  if (checker.Check(request)) return
  const [first] = checker.Errors(request)
  const missing = first?.keyword === 'required' ? (first.params as { requiredProperties?: string[] }).requiredProperties?.[0] : undefined
  const pointer = `${first?.instancePath ?? ''}${missing !== undefined ? `/${missing}` : ''}`
  const field = fieldAt(pointer) || 'messages'
  const detail = first?.message ?? 'is invalid'
  throw new FieldError(field, (name: FieldNames) => `Invalid value for '${name(field)}': ${detail}.`)
}
