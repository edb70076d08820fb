// OpenAI's Responses API (POST <baseUrl>/responses, streamed), for upstreams
// that speak it themselves: the conversation goes as input items (messages,
// function_call and function_call_output items), the first system message as
// `instructions`; the typed stream events (response.output_text.delta,
// response.function_call_arguments.delta, response.completed, …) come back as
// ReplyPieces. Nothing is stored upstream (`store: false`): chatd sends the whole
// conversation every time, as it does to every upstream.

import { ApiError } from '../../errors.ts'
import type { ChatMessage, GenerateRequest, ToolCallDelta, ToolChoice, Usage } from '../backend.ts'
import { reportedError, retryableStatus, unreadable, type RelayedParam } from './failures.ts'
import { MAX_TOOL_CALL_INDEX, type ReplyPiece } from './reply.ts'
import { isObject, parseJson, type Json } from './json.ts'
import { bearer, type StreamReader, type Wire, type WireModel } from './wire.ts'

/** One chat message as Responses input items (an assistant turn with calls is one item per call). */
function inputItems (m: ChatMessage): Json[] {
  if (m.role === 'tool') return [{ type: 'function_call_output', call_id: m.toolCallId ?? '', output: m.content }]
  const items: Json[] = []
  if (m.content !== '' || !(m.toolCalls && m.toolCalls.length > 0)) items.push({ type: 'message', role: m.role, content: m.content })
  for (const call of m.toolCalls ?? []) {
    items.push({ type: 'function_call', call_id: call.id, name: call.function.name, arguments: call.function.arguments })
  }
  return items
}

function toolChoiceOf (choice: ToolChoice): unknown {
  return typeof choice === 'string' ? choice : { type: 'function', name: choice.function.name }
}

export function responsesBody (request: GenerateRequest, model: WireModel): Json {
  // A format the Responses API cannot return is refused before anything is sent.
  if (request.logprobs) {
    throw new ApiError('invalid_parameter', 'This model\'s upstream speaks the Responses API, through which chatd does not relay logprobs.', { param: 'logprobs' })
  }
  const messages = request.messages
  const first = messages[0]
  const instructions = first?.role === 'system' ? first.content : undefined
  const rest = instructions === undefined ? messages : messages.slice(1)
  const body: Json = {
    model: model.upstreamModel,
    input: rest.flatMap(inputItems),
    stream: true,
    store: false,
  }
  if (instructions !== undefined) body.instructions = instructions
  const sent = request.clientSampling ?? { temperature: true, topP: true, topK: true }
  if (sent.temperature) body.temperature = request.temperature
  if (sent.topP) body.top_p = request.topP
  if (model.passTopK && sent.topK && request.topK > 0) body.top_k = request.topK
  if (model.passCacheSalt && request.cacheScope !== undefined) body.cache_salt = request.cacheScope
  if (request.maxTokens !== undefined) body.max_output_tokens = request.maxTokens
  if (request.reasoningEffort !== undefined) body.reasoning = { effort: request.reasoningEffort }
  if (request.tools && request.tools.length > 0) {
    body.tools = request.tools.map(tool => ({
      type: 'function',
      name: tool.function.name,
      ...(tool.function.description !== undefined ? { description: tool.function.description } : {}),
      parameters: tool.function.parameters ?? { type: 'object', properties: {} },
      ...(tool.function.strict !== undefined ? { strict: tool.function.strict } : {}),
    }))
  }
  if (request.toolChoice !== undefined) body.tool_choice = toolChoiceOf(request.toolChoice)
  if (request.parallelToolCalls !== undefined) body.parallel_tool_calls = request.parallelToolCalls
  const format = request.responseFormat
  if (format?.type === 'json_object') body.text = { format: { type: 'json_object' } }
  if (format?.type === 'json_schema') {
    const { name, description, schema, strict } = format.json_schema
    body.text = {
      format: {
        type: 'json_schema',
        name,
        schema: schema ?? { type: 'object' },
        ...(description !== undefined ? { description } : {}),
        ...(strict !== undefined ? { strict } : {}),
      },
    }
  }
  return body
}

function count (value: unknown): number | undefined {
  return Number.isInteger(value) && (value as number) >= 0 ? value as number : undefined
}

/** A response's `usage` in chatd's terms. */
export function readResponseUsage (value: unknown): Usage | undefined {
  if (!isObject(value)) return undefined
  const input = count(value.input_tokens)
  const output = count(value.output_tokens)
  if (input === undefined || output === undefined) return undefined
  const usage: Usage = { prompt_tokens: input, completion_tokens: output, total_tokens: count(value.total_tokens) ?? input + output }
  const cached = isObject(value.input_tokens_details) ? count(value.input_tokens_details.cached_tokens) : undefined
  if (cached !== undefined) usage.prompt_tokens_details = { cached_tokens: cached }
  const reasoning = isObject(value.output_tokens_details) ? count(value.output_tokens_details.reasoning_tokens) : undefined
  if (reasoning !== undefined) usage.completion_tokens_details = { reasoning_tokens: reasoning }
  return usage
}

function text (value: unknown, field: string): string {
  if (value === undefined || value === null) return ''
  if (typeof value !== 'string') throw unreadable(`"${field}" is not text`)
  return value
}

/** How a finished response ended: incomplete for max_output_tokens is `length`; calls made, `tool_calls`. */
function finishOf (response: Json, madeCalls: boolean): string {
  if (response.status === 'incomplete') {
    const reason = isObject(response.incomplete_details) ? response.incomplete_details.reason : undefined
    return reason === 'max_output_tokens' ? 'length' : 'stop'
  }
  return madeCalls ? 'tool_calls' : 'stop'
}

function emptyPiece (): ReplyPiece {
  return { content: '', reasoning: '' }
}

interface OpenCall {
  index: number
  /** Argument text has come in deltas (so the item's final `arguments` repeats it). */
  streamed: boolean
}

class ResponsesStreamReader implements StreamReader {
  done = false
  /** Function-call items by item id and by output_index. */
  readonly #byItem = new Map<string, OpenCall>()
  readonly #byOutput = new Map<number, OpenCall>()
  #calls = 0

  read (_event: string | undefined, data: string): ReplyPiece | undefined {
    if (data.trim() === '') return undefined
    const json = parseJson(data, 'an event')
    if (!isObject(json)) throw unreadable('an event that is not an object')
    switch (json.type) {
      case 'response.output_text.delta':
        return { ...emptyPiece(), content: text(json.delta, 'delta') }
      case 'response.reasoning_summary_text.delta':
      case 'response.reasoning_text.delta':
        return { ...emptyPiece(), reasoning: text(json.delta, 'delta') }
      case 'response.output_item.added':
        return this.#added(json)
      case 'response.function_call_arguments.delta': {
        const call = this.#callOf(json)
        if (call === undefined) return undefined
        const delta = text(json.delta, 'delta')
        if (delta === '') return undefined
        call.streamed = true
        return { ...emptyPiece(), toolCalls: [{ index: call.index, arguments: delta }] }
      }
      case 'response.output_item.done':
        return this.#itemDone(json)
      case 'response.completed':
      case 'response.incomplete': {
        if (!isObject(json.response)) throw unreadable('a finished response without its object')
        this.done = true
        const usage = readResponseUsage(json.response.usage)
        return { ...emptyPiece(), finishReason: finishOf(json.response, this.#calls > 0), ...(usage ? { usage } : {}) }
      }
      case 'response.failed':
      case 'error':
        throw reportedError()
      default:
        // response.created, .in_progress, content parts, *.done echoes, hosted tools' progress.
        return undefined
    }
  }

  #newCall (item: Json, outputIndex: unknown): OpenCall {
    if (this.#calls > MAX_TOOL_CALL_INDEX) throw unreadable('too many tool calls')
    const call: OpenCall = { index: this.#calls++, streamed: false }
    if (typeof item.id === 'string') this.#byItem.set(item.id, call)
    if (Number.isInteger(outputIndex)) this.#byOutput.set(outputIndex as number, call)
    return call
  }

  #callOf (json: Json): OpenCall | undefined {
    return (typeof json.item_id === 'string' ? this.#byItem.get(json.item_id) : undefined) ??
      (Number.isInteger(json.output_index) ? this.#byOutput.get(json.output_index as number) : undefined)
  }

  #added (json: Json): ReplyPiece | undefined {
    const item = json.item
    if (!isObject(item) || item.type !== 'function_call') return undefined
    const call = this.#newCall(item, json.output_index)
    const piece: ToolCallDelta = { index: call.index, id: text(item.call_id, 'call_id'), name: text(item.name, 'name') }
    const args = text(item.arguments, 'arguments')
    if (args !== '') {
      piece.arguments = args
      call.streamed = true
    }
    return { ...emptyPiece(), toolCalls: [piece] }
  }

  /** A call whose arguments came only with its finished item (or that was never announced) gets them here. */
  #itemDone (json: Json): ReplyPiece | undefined {
    const item = json.item
    if (!isObject(item) || item.type !== 'function_call') return undefined
    let call = this.#callOf({ item_id: item.id, output_index: json.output_index })
    const piece: ToolCallDelta = { index: 0 }
    if (call === undefined) {
      call = this.#newCall(item, json.output_index)
      piece.id = text(item.call_id, 'call_id')
      piece.name = text(item.name, 'name')
    }
    piece.index = call.index
    const args = text(item.arguments, 'arguments')
    if (!call.streamed && args !== '') piece.arguments = args
    call.streamed = true
    return piece.arguments === undefined && piece.name === undefined ? undefined : { ...emptyPiece(), toolCalls: [piece] }
  }
}

/** A whole `response` object (an upstream that answered without streaming). */
export function readWholeResponse (body: string): ReplyPiece {
  const json = parseJson(body, 'a body')
  if (!isObject(json)) throw unreadable('a JSON value that is not an object')
  if (json.status === 'failed' || (json.error !== undefined && json.error !== null)) throw reportedError()
  if (!Array.isArray(json.output)) throw unreadable('no "output" list')
  const piece = emptyPiece()
  const calls: ToolCallDelta[] = []
  for (const item of json.output) {
    if (!isObject(item)) throw unreadable('an output item that is not an object')
    const parts = (list: unknown): string => Array.isArray(list) ? list.map(p => isObject(p) ? text(p.text, 'text') : '').join('') : ''
    if (item.type === 'message') piece.content += parts(item.content)
    if (item.type === 'reasoning') piece.reasoning += parts(item.summary) || parts(item.content)
    if (item.type === 'function_call') {
      if (calls.length > MAX_TOOL_CALL_INDEX) throw unreadable('too many tool calls')
      calls.push({ index: calls.length, id: text(item.call_id, 'call_id'), name: text(item.name, 'name'), arguments: text(item.arguments, 'arguments') })
    }
  }
  if (calls.length > 0) piece.toolCalls = calls
  piece.finishReason = finishOf(json, calls.length > 0)
  const usage = readResponseUsage(json.usage)
  if (usage) piece.usage = usage
  return piece
}

/** The Responses API names the format `text` (text.format…): a 400 about it is about the client's response_format. */
function relayedParam (body: unknown): RelayedParam | undefined {
  const error = isObject(body) ? body.error : undefined
  const param = isObject(error) ? error.param : undefined
  if (typeof param !== 'string') return undefined
  return param === 'text' || param.startsWith('text.') ? 'response_format' : undefined
}

export function responsesWire (model: WireModel): Wire {
  return {
    api: 'responses',
    path: 'responses',
    headers: bearer,
    body: request => responsesBody(request, model),
    sendsStop: false,
    separatesReasoning: true,
    streamReader: () => new ResponsesStreamReader(),
    readWhole: readWholeResponse,
    retryable: retryableStatus,
    relayedParam,
  }
}
