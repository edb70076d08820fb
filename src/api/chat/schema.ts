// Schemas of POST /api/v1/chat/completions: the request (the spec's fields with
// their types, ranges and defaults, plus the extras docs/design.md accepts), the
// response, the streamed chunk. Fastify validates the body with these, and
// /docs is generated from them. Unknown fields are ignored, not rejected.

import { Type, type Static } from 'typebox'
import { CACHE_SALT_MAX, DEFAULTS, LOGIT_BIAS_MAX, TOOL_CALL_ID_MAX, TOOL_CALLS_MAX, TOOLS_MAX, TOP_LOGPROBS_MAX, WORDCOUNT_MAX } from '../pipeline/request.ts'

// The bounds every door's request has (the pipeline checks them on each), as this body spells them.
export { CACHE_SALT_MAX, DEFAULTS, LOGIT_BIAS_MAX, TOOL_CALL_ID_MAX, TOOL_CALLS_MAX, TOOLS_MAX, TOP_LOGPROBS_MAX, WORDCOUNT_MAX }

const Role = Type.Enum(['user', 'assistant', 'system', 'developer', 'tool'], { description: 'Who wrote the message. developer is taken as system; tool carries a tool call\'s result (with tool_call_id).' })

/** Tool and function names, as OpenAI allows them. */
const ToolName = Type.String({ minLength: 1, maxLength: 64, pattern: '^[A-Za-z0-9_-]+$', description: 'Letters, digits, _ and -, at most 64.' })

const ToolCallId = Type.String({ minLength: 1, maxLength: TOOL_CALL_ID_MAX })

const MessageToolCall = Type.Object({
  id: ToolCallId,
  type: Type.Literal('function'),
  function: Type.Object({
    name: ToolName,
    arguments: Type.String({ description: 'The arguments as JSON text; their length counts towards MAX_MESSAGE_CHARS.' }),
  }),
})

const TextPart = Type.Object({
  type: Type.Literal('text'),
  text: Type.String(),
}, { description: 'A text part; parts are joined in order.' })

export const Message = Type.Object({
  role: Role,
  content: Type.Optional(Type.Union([Type.String(), Type.Array(TextPart), Type.Null()], {
    description: 'The text of the message: a string, or an array of text parts. null or absent only on an assistant message with tool_calls.',
  })),
  tool_calls: Type.Optional(Type.Array(MessageToolCall, { maxItems: TOOL_CALLS_MAX, description: `Assistant messages: the tool calls the model made (at most ${TOOL_CALLS_MAX}).` })),
  tool_call_id: Type.Optional(ToolCallId),
  name: Type.Optional(Type.String({ maxLength: 64, description: 'Accepted, not used.' })),
})

/** A function tool the model may call; `parameters` is the JSON Schema of its arguments. */
const Tool = Type.Object({
  type: Type.Literal('function'),
  function: Type.Object({
    name: ToolName,
    description: Type.Optional(Type.String({ maxLength: 8192 })),
    parameters: Type.Optional(Type.Object({}, { additionalProperties: true, description: 'A JSON Schema object; absent: no arguments.' })),
    strict: Type.Optional(Type.Union([Type.Boolean(), Type.Null()])),
  }),
})

const ToolChoice = Type.Union([
  Type.Enum(['auto', 'none', 'required']),
  Type.Object({ type: Type.Literal('function'), function: Type.Object({ name: ToolName }) }),
], { description: 'auto (default with tools): the model may call a tool; none: it does not; required: it must call one; {"type":"function","function":{"name"}}: it must call that tool.' })

/**
 * `response_format`: one object whose `type` picks the form; `json_schema` is checked against
 * the type in generate-request.ts, so an error names the field at fault rather than a union.
 */
const ResponseFormat = Type.Object({
  type: Type.Enum(['text', 'json_object', 'json_schema'], { description: 'text: no constraint; json_object: any JSON object; json_schema: JSON matching json_schema.schema.' }),
  json_schema: Type.Optional(Type.Object({
    name: Type.String({ minLength: 1, maxLength: 64, pattern: '^[A-Za-z0-9_-]+$', description: 'The schema\'s name (letters, digits, _ and -).' }),
    description: Type.Optional(Type.String()),
    schema: Type.Optional(Type.Object({}, { additionalProperties: true, description: 'A JSON Schema; absent: any JSON object.' })),
    strict: Type.Optional(Type.Union([Type.Boolean(), Type.Null()], { description: 'true: properties the schema does not name are not generated.' })),
  })),
})

/** Short, free-form names such as "English" or "Formal"; long enough for any real name, short enough to keep out prompt stuffing. */
const ShortName = (def: string, description: string) => Type.Optional(Type.String({ minLength: 1, maxLength: 64, default: def, description }))

export const ChatCompletionRequest = Type.Object({
  // --- the spec's fields (service-interface.md 2.1) ---
  model: Type.String({ minLength: 1, description: 'Id of the model, as listed by GET /api/v1/models.' }),
  messages: Type.Array(Message, { minItems: 1, description: 'The conversation so far.' }),
  language: ShortName(DEFAULTS.language, 'Language of the reply.'),
  tone: ShortName(DEFAULTS.tone, 'Tone of the reply.'),
  wordcount: Type.Optional(Type.Union([Type.Literal('Default'), Type.Integer({ minimum: 1, maximum: WORDCOUNT_MAX })], {
    default: DEFAULTS.wordcount,
    description: `Target length of the reply in words: "Default" or an integer from 1 to ${WORDCOUNT_MAX}.`,
  })),
  googleSearchStatus: Type.Optional(Type.Boolean({ default: DEFAULTS.googleSearchStatus, description: 'Enrich the reply with web search results (needs a search provider).' })),
  stream: Type.Optional(Type.Boolean({ default: DEFAULTS.stream, description: 'Stream the reply as server-sent events.' })),
  temperature: Type.Optional(Type.Number({ minimum: 0, maximum: 2, default: DEFAULTS.temperature, description: '0 is greedy decoding.' })),
  top_p: Type.Optional(Type.Number({ minimum: 0, maximum: 1, default: DEFAULTS.top_p })),
  top_k: Type.Optional(Type.Integer({ minimum: 0, default: DEFAULTS.top_k, description: '0 disables top-k.' })),

  // --- accepted extras (docs/design.md "Request"); null means absent, as clients send it ---
  max_tokens: Type.Optional(Type.Union([Type.Integer({ minimum: 1 }), Type.Null()], { description: 'Upper bound on generated tokens.' })),
  max_completion_tokens: Type.Optional(Type.Union([Type.Integer({ minimum: 1 }), Type.Null()], { description: 'Same as max_tokens; wins when both are given.' })),
  stop: Type.Optional(Type.Union([
    Type.String({ minLength: 1 }),
    Type.Array(Type.String({ minLength: 1 }), { maxItems: 4 }),
    Type.Null(),
  ], { description: 'Up to 4 strings that end the reply; they are not included in it.' })),
  seed: Type.Optional(Type.Union([Type.Integer(), Type.Null()], { description: 'Makes sampling reproducible.' })),
  stream_options: Type.Optional(Type.Union([
    Type.Object({ include_usage: Type.Optional(Type.Boolean()) }),
    Type.Null(),
  ], { description: 'With include_usage, a last chunk carries the usage.' })),
  n: Type.Optional(Type.Union([Type.Integer(), Type.Null()], { description: 'Number of choices; only 1 is supported.' })),
  presence_penalty: Type.Optional(Type.Union([Type.Number({ minimum: -2, maximum: 2 }), Type.Null()], { description: 'Subtracted from the logit of every token generated so far (thinking included).' })),
  frequency_penalty: Type.Optional(Type.Union([Type.Number({ minimum: -2, maximum: 2 }), Type.Null()], { description: 'Subtracted from a token\'s logit once per time it was generated so far (thinking included).' })),
  logit_bias: Type.Optional(Type.Union([
    Type.Record(Type.String({ pattern: '^(0|[1-9][0-9]{0,8})$' }), Type.Number({ minimum: -100, maximum: 100 }), { maxProperties: LOGIT_BIAS_MAX }),
    Type.Null(),
  ], { description: `Token id (of the model's tokenizer, as a string) -> a bias from -100 to 100 added to its logit; at most ${LOGIT_BIAS_MAX} entries. An id outside the vocabulary is a 400.` })),
  reasoning_effort: Type.Optional(Type.Union([Type.Enum(['none', 'minimal', 'low', 'medium', 'high']), Type.Null()], {
    description: 'How long a reasoning model thinks: none/minimal close thinking at once; low, medium and high allow a quarter, half and three quarters of max_tokens (at most 1024, 4096 and 16384 tokens).',
  })),
  min_p: Type.Optional(Type.Union([Type.Number({ minimum: 0, maximum: 1 }), Type.Null()], { description: 'Drop tokens less likely than min_p times the most likely one; 0 is off.' })),
  user: Type.Optional(Type.Union([Type.String({ maxLength: 256 }), Type.Null()], { description: 'End-user id; accepted, not used.' })),
  logprobs: Type.Optional(Type.Union([Type.Boolean(), Type.Null()], { description: 'Return the log-probability of each generated token.' })),
  top_logprobs: Type.Optional(Type.Union([Type.Integer({ minimum: 0, maximum: TOP_LOGPROBS_MAX }), Type.Null()], {
    description: `0 to ${TOP_LOGPROBS_MAX}: how many of the most likely tokens to list at each position; needs logprobs: true.`,
  })),
  cache_salt: Type.Optional(Type.Union([Type.String({ minLength: 1, maxLength: CACHE_SALT_MAX, pattern: '^[\\x20-\\x7e]+$' }), Type.Null()], {
    description: `1 to ${CACHE_SALT_MAX} printable ASCII characters: requests reuse the prefix cache only of requests of the same account with the same salt (none is a salt of its own).`,
  })),
  tools: Type.Optional(Type.Union([Type.Array(Tool, { maxItems: TOOLS_MAX }), Type.Null()], {
    description: `Function tools the model may call (at most ${TOOLS_MAX}); see docs/api.md for what each kind of model does with them.`,
  })),
  tool_choice: Type.Optional(Type.Union([ToolChoice, Type.Null()])),
  parallel_tool_calls: Type.Optional(Type.Union([Type.Boolean(), Type.Null()], { description: 'false: at most one tool call per reply.' })),
  response_format: Type.Optional(Type.Union([ResponseFormat, Type.Null()], {
    description: '{"type":"text"} (default), {"type":"json_object"} or {"type":"json_schema","json_schema":{"name","schema","strict"}}: the answer is constrained to JSON (matching the schema).',
  })),
}, { description: 'Every optional field may be null, which means the same as leaving it out (nullMeansAbsent). Unknown fields are ignored.' })

export type ChatCompletionRequest = Static<typeof ChatCompletionRequest>

interface ObjectSchema { type?: unknown; properties?: Record<string, unknown>; required?: string[]; anyOf?: unknown[] }

/**
 * Removes every optional field whose value is null, at any depth the schema
 * describes (stream_options.include_usage too), before the body is validated:
 * clients send null for "not set", and the schema's defaults then apply as if
 * the field were absent. Required fields keep their null and are refused.
 */
export function nullMeansAbsent (value: unknown, schema: ObjectSchema = ChatCompletionRequest as ObjectSchema): void {
  if (typeof value !== 'object' || value === null || Array.isArray(value) || !schema.properties) return
  const record = value as Record<string, unknown>
  const required = new Set(schema.required ?? [])
  for (const [name, fieldSchema] of Object.entries(schema.properties)) {
    if (!Object.hasOwn(record, name)) continue
    if (record[name] === null && !required.has(name)) {
      delete record[name]
      continue
    }
    // An object-valued field (or a union with an object branch) has optional fields of its own.
    const field = fieldSchema as ObjectSchema
    for (const branch of [field, ...(field.anyOf ?? []) as ObjectSchema[]]) {
      if (branch.properties) nullMeansAbsent(record[name], branch)
    }
  }
}

export const Usage = Type.Object({
  prompt_tokens: Type.Integer(),
  completion_tokens: Type.Integer(),
  total_tokens: Type.Integer(),
  prompt_tokens_details: Type.Optional(Type.Object({
    cached_tokens: Type.Integer({ description: 'Prompt tokens served from the prefix cache (local models).' }),
  })),
  completion_tokens_details: Type.Optional(Type.Object({
    reasoning_tokens: Type.Integer({ description: 'Completion tokens generated inside thinking (local models: exact, tags included; upstream: as it reports).' }),
  })),
})

/** One web search result given to the model (googleSearchStatus); `index` is the number the answer cites, [1] first. */
export const SearchResultItem = Type.Object({
  index: Type.Integer({ minimum: 1 }),
  title: Type.String(),
  url: Type.String(),
  snippet: Type.String(),
})

export type SearchResultItem = Static<typeof SearchResultItem>

const SearchResults = Type.Array(SearchResultItem, { description: 'The web search results the model was given, numbered as it cites them (googleSearchStatus only).' })

const TopLogprob = Type.Object({
  token: Type.String(),
  logprob: Type.Number(),
  bytes: Type.Union([Type.Array(Type.Integer()), Type.Null()], { description: 'The token\'s UTF-8 bytes.' }),
})

const TokenLogprob = Type.Object({
  token: Type.String(),
  logprob: Type.Number(),
  bytes: Type.Union([Type.Array(Type.Integer()), Type.Null()]),
  top_logprobs: Type.Array(TopLogprob),
})

/** With logprobs: the tokens of the answer (`content`) and of the thinking (`reasoning_content`, reasoning: separate). */
const ChoiceLogprobs = Type.Object({
  content: Type.Array(TokenLogprob),
  reasoning_content: Type.Optional(Type.Array(TokenLogprob)),
}, { description: 'Only with logprobs: true.' })

export type ChoiceLogprobs = Static<typeof ChoiceLogprobs>

const FinishReason = Type.Enum(['stop', 'length', 'tool_calls'], { description: 'stop: end of sequence or a stop string; length: max_tokens or the context ran out; tool_calls: the reply is tool calls.' })

const ReplyToolCall = Type.Object({
  id: Type.String(),
  type: Type.Literal('function'),
  function: Type.Object({ name: Type.String(), arguments: Type.String({ description: 'A JSON object, as text.' }) }),
})

/** A streamed piece of a tool call: `id`, `type` and the name first, then argument text to append. */
const ToolCallChunk = Type.Object({
  index: Type.Integer(),
  id: Type.Optional(Type.String()),
  type: Type.Optional(Type.Literal('function')),
  function: Type.Optional(Type.Object({ name: Type.Optional(Type.String()), arguments: Type.Optional(Type.String()) })),
})

/** The response's timings, with `X-Chatd-Timings: 1` (api/pipeline/timings.ts); milliseconds unless named otherwise. */
const Timings = Type.Object({
  ttft_ms: Type.Number({ description: 'From the request\'s checks starting to its first output.' }),
  total_ms: Type.Number({ description: 'From the request\'s checks starting to its end.' }),
  queue_ms: Type.Optional(Type.Number({ description: 'Local models: waiting in the engine\'s queue.' })),
  prompt_n: Type.Integer({ description: 'Prompt tokens.' }),
  cache_n: Type.Integer({ description: 'Prompt tokens found in the prefix cache.' }),
  prompt_ms: Type.Optional(Type.Number({ description: 'Local models: computing the rest of the prompt, to the first token.' })),
  prompt_per_second: Type.Optional(Type.Number({ description: 'Prompt tokens computed per second.' })),
  predicted_n: Type.Integer({ description: 'Generated tokens.' }),
  predicted_ms: Type.Number({ description: 'From the first generated token to the last.' }),
  predicted_per_second: Type.Optional(Type.Number({ description: 'Tokens after the first, per second.' })),
}, { description: 'Only with the request header `X-Chatd-Timings: 1`: where the request\'s time went.' })

export const ChatCompletion = Type.Object({
  id: Type.String({ description: 'chatcmpl- followed by a random string.' }),
  object: Type.Literal('chat.completion'),
  created: Type.Integer({ description: 'Unix seconds.' }),
  model: Type.String(),
  system_fingerprint: Type.String(),
  choices: Type.Array(Type.Object({
    index: Type.Integer(),
    message: Type.Object({
      role: Type.Literal('assistant'),
      content: Type.Union([Type.String(), Type.Null()], { description: 'null when the reply is only tool calls.' }),
      reasoning_content: Type.Optional(Type.String({ description: 'The model\'s thinking, for reasoning models.' })),
      tool_calls: Type.Optional(Type.Array(ReplyToolCall)),
    }),
    logprobs: Type.Optional(ChoiceLogprobs),
    finish_reason: FinishReason,
  })),
  usage: Usage,
  search_results: Type.Optional(SearchResults),
  timings: Type.Optional(Timings),
})

export type ChatCompletion = Static<typeof ChatCompletion>

export const ChatCompletionChunk = Type.Object({
  id: Type.String(),
  object: Type.Literal('chat.completion.chunk'),
  created: Type.Integer(),
  model: Type.String(),
  system_fingerprint: Type.String(),
  choices: Type.Array(Type.Object({
    index: Type.Integer(),
    delta: Type.Object({
      role: Type.Optional(Type.Literal('assistant')),
      content: Type.Optional(Type.String()),
      reasoning_content: Type.Optional(Type.String()),
      tool_calls: Type.Optional(Type.Array(ToolCallChunk)),
    }),
    logprobs: Type.Optional(ChoiceLogprobs),
    finish_reason: Type.Union([FinishReason, Type.Null()]),
  }), { description: 'Empty in the final usage chunk.' }),
  usage: Type.Optional(Type.Union([Usage, Type.Null()])),
  search_results: Type.Optional(SearchResults),
  timings: Type.Optional(Timings),
}, {
  description: 'One `data:` frame of the stream. Order: a role chunk (carrying `search_results` when the request searched the web), content deltas, a chunk with finish_reason (carrying `timings` with `X-Chatd-Timings: 1`), a usage chunk (stream_options.include_usage), then `data: [DONE]`.',
})

export type ChatCompletionChunk = Static<typeof ChatCompletionChunk>
