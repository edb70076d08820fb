// The chat-completions body as chatd's own completion request
// (../pipeline/request.ts): text parts joined, null and absent made one, the
// two token caps made one, stop made a list, the sampling fields the client
// left out left out (the schema's defaults are the pipeline's too). What only
// this body can get wrong is refused here, naming its field: more parts than
// MAX_CONTENT_PARTS, a null content where no tool calls stand in for it, a
// json_schema response_format without its json_schema. And the body's names
// for the pipeline's fields: most are spelled the same, save a tool's (and a
// tool call's) `function` level, googleSearchStatus, and max_completion_tokens
// when the client capped the reply with it.

import type { ResponseFormat } from '../../engine/backend.ts'
import { invalidParam } from '../../errors.ts'
import { fields, type FieldTable } from '../pipeline/fields.ts'
import type { InputLimits } from '../pipeline/input-limits.ts'
import type { CompletionMessage, CompletionRequest } from '../pipeline/request.ts'
import type { ChatCompletionRequest } from './schema.ts'

/** Which sampling fields the client sent (Fastify has filled in the schema's defaults since). */
export interface SentSampling {
  temperature: boolean
  topP: boolean
  topK: boolean
}

export interface ChatTranslation {
  request: CompletionRequest
  fields: FieldTable
}

export function toCompletionRequest (body: ChatCompletionRequest, ctx: { sent?: SentSampling; limits: Pick<InputLimits, 'maxContentParts'> }): ChatTranslation {
  const sent = ctx.sent ?? { temperature: true, topP: true, topK: true }
  const stop = body.stop == null ? undefined : typeof body.stop === 'string' ? [body.stop] : body.stop
  const maxTokens = body.max_completion_tokens ?? body.max_tokens ?? undefined
  const request: CompletionRequest = {
    model: body.model,
    messages: body.messages.map((m, i) => message(m, i, ctx.limits)),
    ...(body.stream !== undefined ? { stream: body.stream } : {}),
    ...(body.language !== undefined ? { language: body.language } : {}),
    ...(body.tone !== undefined ? { tone: body.tone } : {}),
    ...(body.wordcount !== undefined ? { wordcount: body.wordcount } : {}),
    ...(body.googleSearchStatus !== undefined ? { search: body.googleSearchStatus } : {}),
    ...(sent.temperature && body.temperature !== undefined ? { temperature: body.temperature } : {}),
    ...(sent.topP && body.top_p !== undefined ? { topP: body.top_p } : {}),
    ...(sent.topK && body.top_k !== undefined ? { topK: body.top_k } : {}),
    ...(body.min_p != null ? { minP: body.min_p } : {}),
    ...(body.seed != null ? { seed: body.seed } : {}),
    ...(body.presence_penalty != null ? { presencePenalty: body.presence_penalty } : {}),
    ...(body.frequency_penalty != null ? { frequencyPenalty: body.frequency_penalty } : {}),
    ...(body.logit_bias != null ? { logitBias: body.logit_bias } : {}),
    ...(maxTokens !== undefined ? { maxTokens } : {}),
    ...(stop !== undefined ? { stop } : {}),
    ...(body.logprobs != null ? { logprobs: body.logprobs } : {}),
    ...(body.top_logprobs != null ? { topLogprobs: body.top_logprobs } : {}),
    ...(body.reasoning_effort != null ? { reasoningEffort: body.reasoning_effort } : {}),
    ...(body.response_format != null ? { responseFormat: responseFormatOf(body.response_format) } : {}),
    ...(body.tools != null
      ? {
          tools: body.tools.map(t => ({
            type: 'function' as const,
            function: {
              name: t.function.name,
              ...(t.function.description !== undefined ? { description: t.function.description } : {}),
              ...(t.function.parameters !== undefined ? { parameters: t.function.parameters as Record<string, unknown> } : {}),
              ...(typeof t.function.strict === 'boolean' ? { strict: t.function.strict } : {}),
            },
          })),
        }
      : {}),
    ...(body.tool_choice != null ? { toolChoice: body.tool_choice } : {}),
    ...(body.parallel_tool_calls != null ? { parallelToolCalls: body.parallel_tool_calls } : {}),
    ...(body.cache_salt != null ? { cacheSalt: body.cache_salt } : {}),
    ...(body.n != null ? { n: body.n } : {}),
    ...(body.user != null ? { user: body.user } : {}),
  }
  return { request, fields: chatFields(body) }
}

/** One message: its text parts counted and joined, null content only where tool calls stand in for it. */
function message (m: ChatCompletionRequest['messages'][number], i: number, limits: Pick<InputLimits, 'maxContentParts'>): CompletionMessage {
  const at = `messages[${i}]`
  const calls = m.tool_calls ?? []
  // A user message with calls is refused by the pipeline, naming its tool_calls.
  if (m.content == null && calls.length === 0) {
    throw invalidParam(`${at}.content`, `${at}.content may be null or absent only on an assistant message with tool_calls.`)
  }
  const content = m.content ?? ''
  if (typeof content !== 'string' && content.length > limits.maxContentParts) {
    throw invalidParam(`${at}.content`, `Too many content parts: ${content.length}; at most ${limits.maxContentParts} per message are accepted (MAX_CONTENT_PARTS).`)
  }
  return {
    role: m.role,
    content: typeof content === 'string' ? content : content.map(part => part.text).join(''),
    ...(calls.length > 0 ? { toolCalls: calls.map(c => ({ id: c.id, type: 'function' as const, function: { name: c.function.name, arguments: c.function.arguments } })) } : {}),
    ...(m.tool_call_id !== undefined ? { toolCallId: m.tool_call_id } : {}),
  }
}

/** response_format as the pipeline takes it; 400 for a json_schema without its object. */
function responseFormatOf (format: NonNullable<ChatCompletionRequest['response_format']>): ResponseFormat {
  if (format.type !== 'json_schema') return { type: format.type }
  if (format.json_schema === undefined) {
    throw invalidParam('response_format.json_schema', 'response_format of type json_schema needs a json_schema object: {"name": …, "schema": {…}}.')
  }
  const { name, description, schema, strict } = format.json_schema
  return {
    type: 'json_schema',
    json_schema: {
      name,
      ...(description !== undefined ? { description } : {}),
      ...(schema !== undefined ? { schema: schema as Record<string, unknown> } : {}),
      ...(strict != null ? { strict } : {}),
    },
  }
}

/** The chat body's names for the neutral fields. */
export function chatFields (body: Pick<ChatCompletionRequest, 'max_completion_tokens'>): FieldTable {
  return {
    renamed: {
      search: 'googleSearchStatus',
      ...(body.max_completion_tokens != null ? { max_tokens: 'max_completion_tokens' } : {}),
    },
    message: at => at.call === undefined
      ? fields.message(at.index, at.part)
      : `messages[${at.index}].tool_calls[${at.call}]${at.callPart === undefined ? '' : at.callPart === 'id' ? '.id' : `.function.${at.callPart}`}`,
    tool: at => `tools[${at.index}]${at.part ? `.function.${at.part}` : ''}`,
  }
}
