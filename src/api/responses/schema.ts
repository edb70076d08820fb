// Schemas of POST /api/v1/responses. The body schema is what Fastify checks:
// every field bounded, unknown fields accepted and ignored (clients such as the
// Codex CLI add fields of their own, and a refusal would fail every turn).
// `input` items and `tools` entries are checked one by one in code
// (input-items.ts, tools.ts) against the item schemas below, so an error names
// the item and the field at fault (`input[3].call_id`) rather than a union's
// every branch.

import { Type, type Static, type TSchema } from 'typebox'
import { TOOL_CALL_ID_MAX, TOOL_CALLS_MAX, TOP_LOGPROBS_MAX } from '../pipeline/request.ts'

/** The most input items one request may carry (MAX_MESSAGES bounds the conversation they become). */
export const INPUT_ITEMS_MAX = 4096
/** The most entries in `tools` (namespaces count as one; the functions they hold count towards TOOLS_MAX). */
export const TOOL_ENTRIES_MAX = 256
/** The most content parts of one message item, or output parts of one function_call_output. */
export const ITEM_PARTS_MAX = 256
/** OpenAI's metadata bounds: 16 pairs, keys up to 64 characters, values up to 512. */
export const METADATA_PAIRS_MAX = 16
export const METADATA_KEY_MAX = 64
export const METADATA_VALUE_MAX = 512
/** Top-level fields, known and unknown together. */
export const BODY_FIELDS_MAX = 128
/** Ids clients send back (resp_…, msg_…, fc_…): ours are about 40 characters. */
export const ITEM_ID_MAX = 256
/** Short free-form strings: user, safety_identifier, prompt_cache_key. */
const SHORT_MAX = 256

const nullable = <T extends TSchema>(schema: T, description?: string) =>
  Type.Optional(Type.Union([schema, Type.Null()], description !== undefined ? { description } : {}))

/** Names of functions and namespaces, as OpenAI allows them. */
export const ToolName = Type.String({ minLength: 1, maxLength: 64, pattern: '^[A-Za-z0-9_-]+$', description: 'Letters, digits, _ and -, at most 64.' })
const ItemId = Type.String({ minLength: 1, maxLength: ITEM_ID_MAX })
const CallId = Type.String({ minLength: 1, maxLength: TOOL_CALL_ID_MAX })
const Status = Type.String({ maxLength: 32 })

/** A content part: input_text and output_text carry `text`, refusal carries `refusal`; other types are refused in code. */
const ContentPart = Type.Object({
  type: Type.String({ maxLength: 64 }),
  text: Type.Optional(Type.String()),
  refusal: Type.Optional(Type.String()),
})

export const MessageItem = Type.Object({
  type: Type.Optional(Type.Literal('message')),
  role: Type.Enum(['user', 'assistant', 'system', 'developer']),
  content: Type.Union([Type.String(), Type.Array(ContentPart, { maxItems: ITEM_PARTS_MAX })]),
  id: Type.Optional(ItemId),
  status: Type.Optional(Status),
})
export type MessageItem = Static<typeof MessageItem>

export const FunctionCallItem = Type.Object({
  type: Type.Literal('function_call'),
  call_id: CallId,
  name: ToolName,
  arguments: Type.String({ description: 'The arguments as JSON text.' }),
  namespace: Type.Optional(ToolName),
  id: Type.Optional(ItemId),
  status: Type.Optional(Status),
})
export type FunctionCallItem = Static<typeof FunctionCallItem>

export const FunctionCallOutputItem = Type.Object({
  type: Type.Literal('function_call_output'),
  call_id: CallId,
  output: Type.Union([Type.String(), Type.Array(ContentPart, { maxItems: ITEM_PARTS_MAX })]),
  id: Type.Optional(ItemId),
  status: Type.Optional(Status),
})
export type FunctionCallOutputItem = Static<typeof FunctionCallOutputItem>

export const ReasoningItem = Type.Object({
  type: Type.Literal('reasoning'),
  id: Type.Optional(ItemId),
  summary: Type.Optional(Type.Array(Type.Object({ type: Type.String({ maxLength: 64 }), text: Type.String() }), { maxItems: ITEM_PARTS_MAX })),
  /** Whatever it carries: only a string this server sealed for the account opens; anything else is ignored. */
  encrypted_content: Type.Optional(Type.Unknown()),
  content: Type.Optional(Type.Union([Type.Array(Type.Object({ type: Type.String({ maxLength: 64 }), text: Type.String() }), { maxItems: ITEM_PARTS_MAX }), Type.Null()])),
  status: Type.Optional(Status),
})
export type ReasoningItem = Static<typeof ReasoningItem>

/**
 * A hosted search the server ran, sent back: its query and the links of its sources (kept
 * leniently, at most REPLAYED_RESULTS_MAX: input-items.ts) reach the model again.
 */
export const WebSearchCallItem = Type.Object({
  type: Type.Literal('web_search_call'),
  id: Type.Optional(ItemId),
  status: Type.Optional(Status),
  action: Type.Optional(Type.Object({ type: Type.String({ maxLength: 64 }), query: Type.Optional(Type.String({ maxLength: 4096 })) })),
})
export type WebSearchCallItem = Static<typeof WebSearchCallItem>

/** A function tool; `parameters` is the JSON Schema of its arguments. */
export const FunctionTool = Type.Object({
  type: Type.Literal('function'),
  name: ToolName,
  description: nullable(Type.String({ maxLength: 8192 })),
  parameters: nullable(Type.Object({}, { additionalProperties: true })),
  strict: nullable(Type.Boolean()),
})
export type FunctionTool = Static<typeof FunctionTool>

/** A group of tools whose calls name the namespace; its functions are offered like any function. */
export const NamespaceTool = Type.Object({
  type: Type.Literal('namespace'),
  name: ToolName,
  description: nullable(Type.String({ maxLength: 8192 })),
  tools: Type.Array(Type.Object({ type: Type.String({ maxLength: 64 }) }), { maxItems: TOOL_CALLS_MAX }),
})

const TextFormat = Type.Object({
  type: Type.Enum(['text', 'json_object', 'json_schema'], { description: 'text: no constraint; json_object: any JSON object; json_schema: JSON matching `schema`.' }),
  name: Type.Optional(Type.String({ minLength: 1, maxLength: 64, pattern: '^[A-Za-z0-9_-]+$' })),
  description: Type.Optional(Type.String({ maxLength: 8192 })),
  schema: Type.Optional(Type.Object({}, { additionalProperties: true })),
  strict: nullable(Type.Boolean()),
})

const ToolChoice = Type.Union([
  Type.Enum(['auto', 'none', 'required']),
  Type.Object({
    type: Type.String({ maxLength: 64, description: 'function, allowed_tools, or a hosted tool\'s type (web_search, file_search, …).' }),
    name: Type.Optional(ToolName),
    namespace: Type.Optional(ToolName),
    mode: Type.Optional(Type.Enum(['auto', 'required'])),
    tools: Type.Optional(Type.Array(Type.Object({ type: Type.String({ maxLength: 64 }), name: Type.Optional(ToolName), namespace: Type.Optional(ToolName) }), { maxItems: TOOL_ENTRIES_MAX })),
  }),
], { description: 'auto (default): the model may call a function; none: it does not; required: it must call one; {"type":"function","name"}: it must call that one; {"type":"allowed_tools","mode","tools"}: only those; {"type":"web_search"}: it must search (with a search provider).' })

export const ResponsesRequest = Type.Object({
  model: Type.String({ minLength: 1, maxLength: 256, description: 'Id of the model, as listed by GET /api/v1/models.' }),
  input: Type.Optional(Type.Union([
    Type.String(),
    Type.Array(Type.Object({}, { additionalProperties: true }), { maxItems: INPUT_ITEMS_MAX }),
  ], { description: `A user message as a string, or a list of items (at most ${INPUT_ITEMS_MAX}): messages, function_call, function_call_output, reasoning and web_search_call items.` })),
  instructions: nullable(Type.String(), 'The system prompt, put first. Not carried over from a previous response.'),
  max_output_tokens: nullable(Type.Integer({ minimum: 1 }), 'Upper bound on generated tokens, thinking included.'),
  temperature: nullable(Type.Number({ minimum: 0, maximum: 2 }), '0 is greedy decoding.'),
  top_p: nullable(Type.Number({ minimum: 0, maximum: 1 })),
  seed: nullable(Type.Integer(), 'chatd extension: makes sampling reproducible.'),
  text: nullable(Type.Object({
    format: Type.Optional(TextFormat),
    verbosity: nullable(Type.Enum(['low', 'medium', 'high']), 'Accepted, not used.'),
  })),
  tools: nullable(Type.Array(Type.Object({ type: Type.String({ maxLength: 64 }) }), { maxItems: TOOL_ENTRIES_MAX }), 'function and namespace tools; web_search served with the configured search provider; other hosted tools ignored unless tool_choice forces one.'),
  tool_choice: nullable(ToolChoice),
  parallel_tool_calls: nullable(Type.Boolean(), 'false: at most one function call per response.'),
  max_tool_calls: nullable(Type.Integer({ minimum: 1 }), 'Built-in tool calls (the hosted web_search) this response may make; at most 3 whatever is asked. Function calls are not counted (parallel_tool_calls bounds those).'),
  reasoning: nullable(Type.Object({
    effort: nullable(Type.Enum(['none', 'minimal', 'low', 'medium', 'high', 'xhigh', 'max']), 'How long a reasoning model thinks (xhigh and max as high).'),
    summary: nullable(Type.Enum(['auto', 'concise', 'detailed'])),
    generate_summary: nullable(Type.Enum(['auto', 'concise', 'detailed'])),
  })),
  store: nullable(Type.Boolean(), 'Keep the response for previous_response_id and GET (default true).'),
  previous_response_id: nullable(Type.String({ minLength: 1, maxLength: ITEM_ID_MAX }), 'Continue the conversation of a stored response.'),
  include: nullable(Type.Array(Type.String({ maxLength: 128 }), { maxItems: 32 }), 'reasoning.encrypted_content puts the sealed thinking on reasoning items; other values are accepted.'),
  metadata: nullable(Type.Record(Type.String({ maxLength: METADATA_KEY_MAX }), Type.String({ maxLength: METADATA_VALUE_MAX }), { maxProperties: METADATA_PAIRS_MAX, propertyNames: { maxLength: METADATA_KEY_MAX } }), `Up to ${METADATA_PAIRS_MAX} pairs, keys up to ${METADATA_KEY_MAX} characters, values up to ${METADATA_VALUE_MAX}; echoed and stored.`),
  prompt_cache_key: nullable(Type.String({ maxLength: SHORT_MAX }), 'Accepted, not used: the prefix cache is automatic, per account.'),
  client_metadata: nullable(Type.Object({}, { additionalProperties: true, maxProperties: 64 }), 'Accepted, not used.'),
  user: nullable(Type.String({ maxLength: SHORT_MAX }), 'Accepted, echoed.'),
  safety_identifier: nullable(Type.String({ maxLength: SHORT_MAX }), 'Accepted, echoed.'),
  service_tier: nullable(Type.String({ maxLength: 32 }), 'Accepted; the response says default.'),
  truncation: nullable(Type.Enum(['auto', 'disabled']), 'Accepted; a conversation longer than the context is refused (context_length_exceeded).'),
  stream: nullable(Type.Boolean(), 'Stream the response as server-sent events.'),
  stream_options: nullable(Type.Object({ include_obfuscation: Type.Optional(Type.Boolean()) })),
  top_logprobs: nullable(Type.Integer({ minimum: 0, maximum: TOP_LOGPROBS_MAX }), 'Accepted, not used.'),
  background: nullable(Type.Boolean(), 'Background mode is not built: true is refused.'),
}, { maxProperties: BODY_FIELDS_MAX, description: 'Every optional field may be null, which means the same as leaving it out. Unknown fields are ignored.' })

export type ResponsesRequest = Static<typeof ResponsesRequest>

/** The response object, loosely: /docs lists its fields; the route builds it in output.ts. */
export const ResponseObject = Type.Object({
  id: Type.String({ description: 'resp_ followed by random characters.' }),
  object: Type.Literal('response'),
  created_at: Type.Integer({ description: 'Unix seconds.' }),
  status: Type.Enum(['completed', 'incomplete', 'failed', 'in_progress']),
  incomplete_details: Type.Union([Type.Object({ reason: Type.String() }), Type.Null()]),
  model: Type.String(),
  output: Type.Array(Type.Object({ type: Type.String(), id: Type.String() }, { additionalProperties: true }), { description: 'reasoning, message, function_call and web_search_call items, in order.' }),
  usage: Type.Union([Type.Object({
    input_tokens: Type.Integer(),
    input_tokens_details: Type.Object({ cached_tokens: Type.Integer() }),
    output_tokens: Type.Integer(),
    output_tokens_details: Type.Object({ reasoning_tokens: Type.Integer() }),
    total_tokens: Type.Integer(),
  }), Type.Null()]),
}, { additionalProperties: true })

export type ResponseObject = Static<typeof ResponseObject>
