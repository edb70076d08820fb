// Schemas of POST /api/v1/messages (Anthropic's Messages API): the request as
// Fastify validates it, and the message it answers. Content blocks are checked
// loosely here (an object with a `type`) and one by one in to-request.ts, so a
// refusal names the block at fault instead of listing every branch of a union.
// Unknown fields are accepted and ignored at every level: Anthropic's betas add
// fields often, and refusing one would fail the client that sent it.

import { Type, type Static } from 'typebox'
import { TOOLS_MAX } from '../pipeline/request.ts'

/** Anthropic's tool names: letters, digits, _ and -, at most 128 (MCP tools' names run long). */
export const TOOL_NAME_PATTERN = /^[A-Za-z0-9_-]{1,128}$/
/** The most stop sequences a request may send (the chat completions limit: every backend honours it). */
export const STOP_SEQUENCES_MAX = 4
/** The longest model id accepted. */
export const ID_MAX = 256
/** metadata.user_id: unused, and bounded; Claude Code sends a JSON text of about 150 characters there. */
export const USER_ID_MAX = 4096

/** One content block, as sent; its fields are checked by type in to-request.ts. */
export const ContentBlock = Type.Object({
  type: Type.String({ minLength: 1, maxLength: 64, description: 'text, image, document, tool_use, tool_result, thinking, redacted_thinking, …' }),
}, { additionalProperties: true, description: 'A content block; see docs/api.md for what each type does here.' })

export type ContentBlock = Static<typeof ContentBlock> & Record<string, unknown>

const Content = Type.Union([Type.String(), Type.Array(ContentBlock)], { description: 'A string, or an array of content blocks.' })

export const InputMessage = Type.Object({
  role: Type.Enum(['user', 'assistant', 'system'], { description: 'user or assistant; system (a mid-conversation instruction, as Claude Code sends it) stays in its place.' }),
  content: Content,
})

const SystemBlock = Type.Object({ type: Type.Literal('text'), text: Type.String() }, { additionalProperties: true })

const ToolChoice = Type.Object({
  type: Type.Enum(['auto', 'any', 'tool', 'none']),
  name: Type.Optional(Type.String({ minLength: 1, maxLength: 128 })),
  disable_parallel_tool_use: Type.Optional(Type.Boolean()),
}, { description: 'auto: the model may call a tool; any: it must call one; tool (with name): it must call that one; none: it does not.' })

const Thinking = Type.Object({
  type: Type.Enum(['enabled', 'adaptive', 'disabled']),
  budget_tokens: Type.Optional(Type.Integer({ minimum: 0 })),
  display: Type.Optional(Type.Enum(['summarized', 'omitted'], { description: 'omitted: thinking blocks carry empty text (their signature still holds the thinking).' })),
})

const OutputConfig = Type.Object({
  effort: Type.Optional(Type.Enum(['low', 'medium', 'high', 'xhigh', 'max'])),
  format: Type.Optional(Type.Union([
    Type.Object({ type: Type.Literal('json_schema'), schema: Type.Object({}, { additionalProperties: true }) }),
    Type.Null(),
  ], { description: 'Structured output: the answer is JSON matching the schema.' })),
}, { additionalProperties: true })

export const MessagesRequest = Type.Object({
  model: Type.String({ minLength: 1, maxLength: ID_MAX, description: 'Id of the model, as listed by GET /api/v1/models.' }),
  max_tokens: Type.Integer({ minimum: 1, description: 'Upper bound on generated tokens (thinking included); required, as Anthropic requires it.' }),
  messages: Type.Array(InputMessage, { minItems: 1 }),
  system: Type.Optional(Type.Union([Type.String(), Type.Array(SystemBlock)], { description: 'The system prompt: a string or text blocks.' })),
  stream: Type.Optional(Type.Boolean()),
  temperature: Type.Optional(Type.Number({ minimum: 0, maximum: 1 })),
  top_p: Type.Optional(Type.Number({ minimum: 0, maximum: 1 })),
  top_k: Type.Optional(Type.Integer({ minimum: 0 })),
  stop_sequences: Type.Optional(Type.Array(Type.String({ minLength: 1 }), { maxItems: STOP_SEQUENCES_MAX, description: `At most ${STOP_SEQUENCES_MAX}.` })),
  tools: Type.Optional(Type.Array(Type.Object({
    name: Type.String({ minLength: 1, maxLength: 128 }),
    type: Type.Optional(Type.String({ maxLength: 64 })),
  }, { additionalProperties: true }), { maxItems: TOOLS_MAX, description: `Client tools ({name, description, input_schema}) and server tools ({type, name}); at most ${TOOLS_MAX}.` })),
  tool_choice: Type.Optional(ToolChoice),
  thinking: Type.Optional(Thinking),
  output_config: Type.Optional(OutputConfig),
  metadata: Type.Optional(Type.Object({ user_id: Type.Optional(Type.Union([Type.String({ maxLength: USER_ID_MAX }), Type.Null()])) }, { additionalProperties: true })),
  service_tier: Type.Optional(Type.String({ maxLength: 64 })),
}, { additionalProperties: true, description: 'Anthropic\'s Messages API request. Unknown fields (context_management, container, mcp_servers, new betas\') are accepted and ignored.' })

export type MessagesRequest = Static<typeof MessagesRequest>

/** count_tokens takes the same body without max_tokens. */
export const CountTokensRequest = Type.Omit(MessagesRequest, ['max_tokens', 'stream'])
export type CountTokensRequest = Static<typeof CountTokensRequest>

export const AnthropicUsage = Type.Object({
  input_tokens: Type.Integer({ description: 'Prompt tokens computed for this request (those read from the prefix cache excluded).' }),
  output_tokens: Type.Integer(),
  cache_read_input_tokens: Type.Integer({ description: 'Prompt tokens served from the prefix cache (local models).' }),
  cache_creation_input_tokens: Type.Integer({ description: 'Always 0: the prefix cache is written as a side effect, never billed apart.' }),
  server_tool_use: Type.Optional(Type.Object({ web_search_requests: Type.Integer() }, { description: 'Web searches chatd ran for the reply (the web_search server tool), failed ones left out.' })),
})

export type AnthropicUsage = Static<typeof AnthropicUsage>

const ResponseBlock = Type.Union([
  Type.Object({ type: Type.Literal('thinking'), thinking: Type.String(), signature: Type.String() }),
  Type.Object({ type: Type.Literal('text'), text: Type.String() }),
  Type.Object({ type: Type.Literal('tool_use'), id: Type.String(), name: Type.String(), input: Type.Unknown() }),
  Type.Object({ type: Type.Literal('server_tool_use'), id: Type.String(), name: Type.Literal('web_search'), input: Type.Object({}, { additionalProperties: true, description: '{query}: what was searched for.' }) }),
  Type.Object({
    type: Type.Literal('web_search_tool_result'),
    tool_use_id: Type.String(),
    content: Type.Union([
      Type.Array(Type.Object({ type: Type.Literal('web_search_result'), url: Type.String(), title: Type.String(), page_age: Type.Null(), encrypted_content: Type.String({ description: "The result's text, sealed for the account: sent back on a later turn, the model reads it again." }) })),
      Type.Object({
        type: Type.Literal('web_search_tool_result_error'),
        error_code: Type.Enum(['invalid_tool_input', 'unavailable', 'max_uses_exceeded'], { description: 'invalid_tool_input: the call named no query; unavailable: the provider failed; max_uses_exceeded: the reply\'s searches were used up.' }),
      }),
    ]),
  }),
])

export type ResponseBlock = Static<typeof ResponseBlock>

export const StopReason = Type.Enum(['end_turn', 'max_tokens', 'stop_sequence', 'tool_use'])
export type StopReason = Static<typeof StopReason>

export const AnthropicMessage = Type.Object({
  id: Type.String({ description: 'msg_ followed by a random string.' }),
  type: Type.Literal('message'),
  role: Type.Literal('assistant'),
  model: Type.String(),
  content: Type.Array(ResponseBlock),
  stop_reason: StopReason,
  stop_sequence: Type.Union([Type.String(), Type.Null()]),
  usage: AnthropicUsage,
})

export type AnthropicMessage = Static<typeof AnthropicMessage>

export const AnthropicError = Type.Object({
  type: Type.Literal('error'),
  error: Type.Object({
    type: Type.String({ description: 'invalid_request_error, authentication_error, permission_error, not_found_error, request_too_large, rate_limit_error, api_error or overloaded_error' }),
    message: Type.String(),
  }),
}, { description: 'Anthropic\'s error body' })
