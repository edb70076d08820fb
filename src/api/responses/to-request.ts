// A Responses request as chatd's completion request (../pipeline/request.ts):
// `instructions` first as a system message, then the stored conversation a
// previous_response_id continues, then this turn's items; function_call items
// become an assistant message's tool calls, their outputs tool messages. It
// also keeps where each message and tool came from, the table the pipeline
// names its refusals from: `messages[4].content` is `input[6].content` here.

import { invalidParam } from '../../errors.ts'
import type { FieldTable } from '../pipeline/fields.ts'
import type { CompletionMessage, CompletionRequest } from '../pipeline/request.ts'
import { checkInputItems, messageText, normalisedItem, outputText, searchSources, type InputItem } from './input-items.ts'
import type { ResponsesRequest } from './schema.ts'
import { offeredName, planTools, type ToolPlan } from './tools.ts'
import type { ToolCall } from '../../engine/backend.ts'
import { replayedCall, replayedResult } from '../pipeline/hosted-search.ts'

/** Where a message came from: the item (or field) that made it, and each of its tool calls'. */
interface MessageSource {
  item: string
  calls: string[]
  /** The item made the message whole (a replayed search's result): any part of it is the item. */
  whole?: boolean
}

export interface Translation {
  request: CompletionRequest
  tools: ToolPlan
  /**
   * This turn's input items with an id each, as the store keeps them: made when the response is
   * stored, not here (cleaning and naming thousands of items is work an admitted request pays for).
   */
  storedInput: () => Array<Record<string, unknown>>
  /** The Responses body's names for the pipeline's fields (errors name these). */
  fields: FieldTable
}

export interface TranslationContext {
  /** The conversation previous_response_id continues (the store's items, oldest first). */
  chain?: Array<Record<string, unknown>>
  searchConfigured: boolean
}

const REASONING_EFFORT: Record<string, CompletionRequest['reasoningEffort']> = {
  none: 'none', minimal: 'minimal', low: 'low', medium: 'medium', high: 'high', xhigh: 'high', max: 'high',
}

export function toCompletionRequest (body: ResponsesRequest, ctx: TranslationContext): Translation {
  if (body.background === true) {
    throw invalidParam('background', 'Background mode is not supported by this server; send background: false (or leave it out).')
  }
  for (const field of ['conversation', 'prompt'] as const) {
    if ((body as Record<string, unknown>)[field] != null) {
      throw invalidParam(field, `${field} is not supported by this server; continue a conversation with previous_response_id.`)
    }
  }
  const tools = planTools(body, { searchConfigured: ctx.searchConfigured })
  const messages: CompletionMessage[] = []
  const sources: MessageSource[] = []
  if (typeof body.instructions === 'string' && body.instructions !== '') {
    messages.push({ role: 'system', content: body.instructions })
    sources.push({ item: 'instructions', calls: [] })
  }

  const chainItems = checkInputItems(ctx.chain ?? [], () => 'previous_response_id')
  appendItems(messages, sources, chainItems, () => 'previous_response_id')
  const input = body.input
  let storedInput = (): Array<Record<string, unknown>> => []
  if (typeof input === 'string') {
    messages.push({ role: 'user', content: input })
    sources.push({ item: 'input', calls: [] })
    storedInput = () => [normalisedItem({ type: 'message', role: 'user', content: [{ type: 'input_text', text: input }] })]
  } else if (input !== undefined) {
    const items = checkInputItems(input, i => `input[${i}]`)
    appendItems(messages, sources, items, i => `input[${i}]`)
    storedInput = () => input.map(item => normalisedItem(item as Record<string, unknown>))
  }
  if (!messages.some(m => m.role !== 'system')) {
    throw invalidParam('input', 'The request has nothing for the model to answer: send input (a string or a list of items), or previous_response_id.')
  }

  const format = body.text?.format
  const parallel = body.parallel_tool_calls === false ? false : body.parallel_tool_calls ?? undefined
  const effort = body.reasoning?.effort
  const request: CompletionRequest = {
    model: body.model,
    messages,
    stream: body.stream === true,
    ...(body.temperature != null ? { temperature: body.temperature } : {}),
    ...(body.top_p != null ? { topP: body.top_p } : {}),
    ...(body.seed != null ? { seed: body.seed } : {}),
    ...(body.max_output_tokens ? { maxTokens: body.max_output_tokens } : {}),
    ...(effort ? { reasoningEffort: REASONING_EFFORT[effort] } : {}),
    ...(tools.tools.length > 0 ? { tools: tools.tools } : {}),
    ...(tools.toolChoice !== undefined ? { toolChoice: tools.toolChoice } : {}),
    ...(parallel !== undefined ? { parallelToolCalls: parallel } : {}),
    ...(format && format.type !== 'text'
      ? {
          responseFormat: format.type === 'json_object'
            ? { type: 'json_object' as const }
            : {
                type: 'json_schema' as const,
                json_schema: {
                  name: format.name ?? 'response',
                  ...(format.description !== undefined ? { description: format.description } : {}),
                  ...(format.schema !== undefined ? { schema: format.schema as Record<string, unknown> } : {}),
                  ...(typeof format.strict === 'boolean' ? { strict: format.strict } : {}),
                },
              },
        }
      : {}),
    ...(body.user ? { user: body.user } : {}),
    // prompt_cache_key is not a cache_salt: a salt would keep a new thread of the same client
    // from reusing the cache of the instructions every thread starts with.
  }
  return {
    request,
    tools,
    storedInput,
    fields: responsesFields(sources, tools),
  }
}

/** Adds the items to the conversation: calls join the assistant message before them, outputs become tool messages. */
function appendItems (messages: CompletionMessage[], sources: MessageSource[], items: InputItem[], at: (i: number) => string): void {
  items.forEach((item, i) => {
    const where = at(i)
    switch (item.kind) {
      case 'message':
        messages.push({ role: item.role, content: messageText(item, where) })
        sources.push({ item: where, calls: [] })
        return
      case 'function_call': {
        const call = { id: item.call_id, type: 'function' as const, function: { name: offeredName(item.name, item.namespace), arguments: item.arguments } }
        const last = messages.at(-1)
        if (last?.role === 'assistant') {
          (last.toolCalls ??= []).push(call)
          sources.at(-1)!.calls.push(where)
        } else {
          messages.push({ role: 'assistant', content: '', toolCalls: [call] })
          sources.push({ item: where, calls: [where] })
        }
        return
      }
      case 'function_call_output':
        messages.push({ role: 'tool', toolCallId: item.call_id, content: outputText(item, where) })
        sources.push({ item: where, calls: [] })
        break
      case 'reasoning':
        // Accepted whatever it carries, and never opened: earlier thinking adds nothing to the prompt
        // (prompt shaping drops the thinking of earlier turns, prompt/shape.ts, which is what the model
        // was trained to see), so a sealed value sent back has nothing to do here.
        break
      case 'web_search_call': {
        // A search run on an earlier turn reaches the model again as the call it made and the result
        // it read: the sources' links (the item carries no snippets), or that it failed. An item
        // that says neither (no sources kept) adds nothing, rather than a result the model never read.
        const replay = replayedSearch(item, where)
        if (replay === undefined) break
        const last = messages.at(-1)
        if (last?.role === 'assistant') {
          (last.toolCalls ??= []).push(replay.call)
          sources.at(-1)!.calls.push(where)
        } else {
          messages.push({ role: 'assistant', content: '', toolCalls: [replay.call] })
          sources.push({ item: where, calls: [where] })
        }
        messages.push({ role: 'tool', toolCallId: replay.call.id, content: replay.result })
        sources.push({ item: where, calls: [], whole: true })
        break
      }
    }
  })
}

/** The call and the result an earlier search item replays as; undefined when it has neither a query and sources nor a failure to tell. */
function replayedSearch (item: Extract<InputItem, { kind: 'web_search_call' }>, where: string): { call: ToolCall; result: string } | undefined {
  const query = item.action?.type === 'search' ? item.action.query : undefined
  if (query === undefined || query === '') return undefined
  const failed = item.status === 'failed'
  const results = failed ? undefined : searchSources(item.action)
  if (!failed && results === undefined) return undefined
  return { call: replayedCall(item.id ?? `ws_${where}`, query), result: replayedResult(query, results) }
}

/**
 * The Responses body's names for the pipeline's fields: message i is the item (or instructions)
 * that made it, its tool call k the function_call item of call k, and a tool message's call id
 * that item's `call_id`; tool i the function or namespace entry it came from.
 */
function responsesFields (sources: MessageSource[], tools: ToolPlan): FieldTable {
  return {
    renamed: {
      messages: 'input',
      max_tokens: 'max_output_tokens',
      reasoning_effort: 'reasoning.effort',
      response_format: 'text.format',
      'response_format.json_schema': 'text.format',
    },
    message: at => {
      const source = sources[at.index]
      if (source === undefined) return 'input'
      if (at.call !== undefined) {
        const item = source.calls[at.call] ?? source.item
        return at.callPart === undefined ? item : `${item}.${at.callPart === 'id' ? 'call_id' : at.callPart}`
      }
      // A field that made one message whole: it is the field at fault, whatever part of the message.
      if (source.whole === true || source.item === 'instructions' || source.item === 'input' || source.item === 'previous_response_id') return source.item
      if (at.part === 'tool_calls') return source.calls[0] ?? source.item
      if (at.part === 'tool_call_id') return `${source.item}.call_id`
      if (at.part === 'content') return `${source.item}.content`
      return source.item
    },
    tool: at => `${tools.sources[at.index] ?? 'tools'}${at.part ? `.${at.part}` : ''}`,
  }
}
