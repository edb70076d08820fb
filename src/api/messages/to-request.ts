// A Messages API request -> chatd's completion request
// (../pipeline/request.ts). Anthropic's blocks become messages of one text
// each: a user turn's tool_result blocks become tool messages (first, in
// order) and its other text a user message after them; an assistant turn's
// tool_use blocks become its tool calls. Thinking sent back adds nothing to the
// prompt (earlier thinking is stripped from every prompt) and is never opened.
// Each refusal is a 400 naming the Anthropic field at fault; the pipeline names
// its own refusals' fields from the table `messagesFields` gives it.

import { ApiError, invalidParam } from '../../errors.ts'
import type { FieldTable } from '../pipeline/fields.ts'
import type { InputLimits } from '../pipeline/input-limits.ts'
import { codePoints } from '../pipeline/input-limits.ts'
import type { CompletionMessage, CompletionRequest } from '../pipeline/request.ts'
import type { ToolDefinition } from '../../engine/backend.ts'
import type { ReasoningSeal } from '../reasoning-seal.ts'
import { REPLAYED_RESULTS_MAX, replayedCall, replayedResult, searchFailed, searchNotRun, WEB_SEARCH_FUNCTION, webSearchFunction } from '../pipeline/hosted-search.ts'
import type { SearchResult } from '../../search/provider.ts'
import { TOOL_NAME_PATTERN, type ContentBlock, type MessagesRequest } from './schema.ts'
import { isWebSearch, webSearchPlan, type WebSearchPlan } from './web-search.ts'

/** The request, and what the door needs besides: how to render thinking, and how the pipeline names its fields. */
export interface Translated {
  request: CompletionRequest
  /** omitted: thinking blocks carry '' (their signature still seals the thinking). */
  thinkingDisplay: 'summarized' | 'omitted'
  /** The Messages body's names for the pipeline's fields (errors name these). */
  fields: FieldTable
  /** The model is offered the hosted web_search function: chatd runs its calls (hosted-search.ts). */
  webSearch?: WebSearchPlan
}

/** Server tools chatd does not run: ignored when offered, refused when forced. */
function isServerTool (tool: { type?: string }): boolean {
  return tool.type !== undefined && tool.type !== 'custom'
}

/** Block types that carry something a text-only model cannot read. */
const UNREADABLE = new Set(['image', 'document', 'search_result', 'container_upload'])

function blockText (block: ContentBlock, at: string): string {
  if (typeof block.text !== 'string') throw invalidParam(`${at}.text`, `${at}.text must be a string.`)
  return block.text
}

/** A plain-text document ({"source":{"type":"text","data"}}) reads as text; any other source is refused like an image. */
function documentText (block: ContentBlock, at: string): string | undefined {
  const source = block.source as { type?: unknown; data?: unknown } | undefined
  if (block.type === 'document' && source?.type === 'text' && typeof source.data === 'string') return source.data
  return undefined
}

function unreadable (block: ContentBlock, at: string): ApiError {
  return invalidParam(at, `${at}: ${block.type} blocks are not supported: the models on this server read text only. Send the content as text.`)
}

/** Text of a tool_result's content (a string or text blocks). */
function toolResultText (content: unknown, at: string, limits: InputLimits): string {
  if (content === undefined || content === null) return ''
  if (typeof content === 'string') return content
  if (!Array.isArray(content)) throw invalidParam(`${at}.content`, `${at}.content must be a string or an array of content blocks.`)
  if (content.length > limits.maxContentParts) {
    throw invalidParam(`${at}.content`, `Too many content blocks: ${content.length}; at most ${limits.maxContentParts} per tool result are accepted (MAX_CONTENT_PARTS).`)
  }
  return content.map((block: unknown, k) => {
    const where = `${at}.content[${k}]`
    if (typeof block !== 'object' || block === null) throw invalidParam(where, `${where} must be a content block object.`)
    const b = block as ContentBlock
    if (b.type === 'text') return blockText(b, where)
    const doc = documentText(b, where)
    if (doc !== undefined) return doc
    if (UNREADABLE.has(b.type)) throw unreadable(b, where)
    throw invalidParam(`${where}.type`, `${where}.type: '${b.type}' blocks are not accepted inside a tool_result (text only).`)
  }).join('\n\n')
}

function toolUseId (value: unknown, at: string): string {
  if (typeof value !== 'string' || value.length === 0 || value.length > 256) {
    throw invalidParam(at, `${at} must be a string of 1 to 256 characters.`)
  }
  return value
}

export interface TranslateContext {
  /** The authenticated account: signatures are opened for it. */
  accountId: string | number
  seal: ReasoningSeal
  limits: InputLimits
  /** A search provider is configured: an offered web_search server tool is offered to the model as a function chatd runs. */
  searchConfigured?: boolean
}

/** The completion request for `body`; throws a 400 naming the Anthropic field at fault. */
export function toCompletionRequest (body: MessagesRequest, ctx: TranslateContext): Translated {
  const messages: CompletionMessage[] = []
  const messageOrigin: number[] = []

  if (body.system !== undefined) {
    const text = typeof body.system === 'string' ? body.system : body.system.map(b => b.text).join('\n\n')
    if (text !== '') {
      messages.push({ role: 'system', content: text })
      messageOrigin.push(-1)
    }
  }

  /** The ids of the tool_use blocks of the assistant turn just before (tool_results must answer them). */
  let openCalls = new Set<string>()

  body.messages.forEach((message, i) => {
    const at = `messages[${i}]`
    const push = (m: CompletionMessage): void => {
      messages.push(m)
      messageOrigin.push(i)
    }
    if (typeof message.content === 'string') {
      push({ role: message.role, content: message.content })
      openCalls = new Set()
      return
    }
    const blocks = message.content as ContentBlock[]
    if (blocks.length > ctx.limits.maxContentParts) {
      throw invalidParam(`${at}.content`, `Too many content blocks: ${blocks.length}; at most ${ctx.limits.maxContentParts} per message are accepted (MAX_CONTENT_PARTS).`)
    }
    const texts: string[] = []
    const results: CompletionMessage[] = []
    const calls: NonNullable<CompletionMessage['toolCalls']> = []
    /** This turn's searches (server_tool_use id → query) whose result has not come yet. */
    const searches = new Map<string, string>()
    let chars = 0
    blocks.forEach((block, j) => {
      const where = `${at}.content[${j}]`
      switch (block.type) {
        case 'text':
          texts.push(blockText(block, where))
          break
        case 'tool_use': {
          if (message.role !== 'assistant') throw invalidParam(`${where}.type`, `${where}: tool_use blocks belong to assistant messages.`)
          const id = toolUseId(block.id, `${where}.id`)
          if (typeof block.name !== 'string' || !TOOL_NAME_PATTERN.test(block.name)) {
            throw invalidParam(`${where}.name`, `${where}.name must be 1 to 128 letters, digits, _ or -.`)
          }
          const input = block.input ?? {}
          if (typeof input !== 'object' || Array.isArray(input)) throw invalidParam(`${where}.input`, `${where}.input must be an object.`)
          calls.push({ id, type: 'function', function: { name: block.name, arguments: JSON.stringify(input) } })
          break
        }
        case 'tool_result': {
          if (message.role !== 'user') throw invalidParam(`${where}.type`, `${where}: tool_result blocks belong to user messages.`)
          const id = toolUseId(block.tool_use_id, `${where}.tool_use_id`)
          if (!openCalls.has(id)) {
            throw invalidParam(`${where}.tool_use_id`, `${where}.tool_use_id '${id.slice(0, 64)}' answers no tool_use block of the assistant message just before.`)
          }
          const text = toolResultText(block.content, where, ctx.limits)
          // A tool message has no error flag: the model reads it in the text.
          results.push({ role: 'tool', toolCallId: id, content: block.is_error === true ? `Error: ${text}` : text })
          break
        }
        case 'thinking':
        case 'redacted_thinking':
          // Sent back as the client got it, and never opened: it adds nothing to the prompt (earlier
          // turns' thinking is stripped), whoever sealed it; never an error.
          break
        case 'server_tool_use': {
          // A search chatd ran on an earlier turn; replayed with its result, just below. Any other
          // server tool, or a malformed one, adds nothing (as a value chatd did not write).
          const query = (block.input as { query?: unknown } | undefined)?.query
          if (message.role === 'assistant' && block.name === WEB_SEARCH_FUNCTION && isReplayableId(block.id) && typeof query === 'string') searches.set(block.id, query)
          break
        }
        case 'web_search_tool_result': {
          const query = isReplayableId(block.tool_use_id) ? searches.get(block.tool_use_id) : undefined
          if (query === undefined) break // it answers no search of this turn: nothing to replay
          searches.delete(block.tool_use_id as string)
          // The turn as the model wrote it: its text so far ending in the call, then the call's
          // result as the model read it (the results' text opens only if chatd sealed it for this account).
          const call = replayedCall(block.tool_use_id as string, query)
          const result = searchResultText(query, block.content, ctx)
          const before = texts.splice(0).join('\n\n')
          chars += codePoints(before) + codePoints(call.function.arguments) + codePoints(result)
          push({ role: 'assistant', content: before, toolCalls: [call] })
          push({ role: 'tool', toolCallId: call.id, content: result })
          break
        }
        default: {
          const doc = documentText(block, where)
          if (doc !== undefined) {
            texts.push(doc)
            break
          }
          if (UNREADABLE.has(block.type)) throw unreadable(block, where)
          throw invalidParam(`${where}.type`, `${where}.type: '${String(block.type).slice(0, 64)}' blocks are not supported (text, tool_use, tool_result, thinking and redacted_thinking are).`)
        }
      }
    })
    for (const r of results) chars += codePoints(r.content)
    for (const t of texts) chars += codePoints(t)
    for (const c of calls) chars += codePoints(c.function.name) + codePoints(c.function.arguments)
    if (chars > ctx.limits.maxMessageChars) {
      throw invalidParam(`${at}.content`, `The message is ${chars} characters long; at most ${ctx.limits.maxMessageChars} are accepted (MAX_MESSAGE_CHARS).`)
    }
    results.forEach(push)
    const text = texts.join('\n\n')
    if (calls.length > 0) push({ role: 'assistant', content: text, toolCalls: calls })
    // A user turn of only tool results has no text of its own to add after them.
    else if (results.length === 0 || text !== '') push({ role: message.role, content: text })
    openCalls = new Set(calls.map(c => c.id))
  })

  const { tools, toolOrigin, webSearch } = toolsOf(body, ctx.searchConfigured === true)
  const request: CompletionRequest = {
    model: body.model,
    messages,
    maxTokens: body.max_tokens,
    stream: body.stream === true,
    ...(body.temperature !== undefined ? { temperature: body.temperature } : {}),
    ...(body.top_p !== undefined ? { topP: body.top_p } : {}),
    ...(body.top_k !== undefined ? { topK: body.top_k } : {}),
    ...(body.stop_sequences && body.stop_sequences.length > 0 ? { stop: body.stop_sequences } : {}),
    ...(tools.length > 0 ? { tools } : {}),
    ...toolChoiceOf(body, tools, webSearch !== undefined),
    ...reasoningOf(body),
    ...(body.output_config?.format ? { responseFormat: { type: 'json_schema', json_schema: { name: 'output', schema: body.output_config.format.schema as Record<string, unknown>, strict: true } } } : {}),
  }
  return {
    request,
    thinkingDisplay: body.thinking?.display === 'omitted' ? 'omitted' : 'summarized',
    fields: messagesFields(messageOrigin, toolOrigin),
    ...(webSearch ? { webSearch } : {}),
  }
}

/** A server tool id worth replaying: the shape chatd writes them in, and bounded. */
function isReplayableId (id: unknown): id is string {
  return typeof id === 'string' && /^[A-Za-z0-9_-]{1,128}$/.test(id)
}

/** A web_search_tool_result's content as the model read it on that turn (hosted-search.ts). */
function searchResultText (query: string, content: unknown, ctx: TranslateContext): string {
  if (!Array.isArray(content)) {
    const code = (content as { error_code?: unknown } | null)?.error_code
    return code === 'unavailable' || typeof code !== 'string' ? searchFailed() : searchNotRun(code.replaceAll('_', ' ').slice(0, 64))
  }
  const results: SearchResult[] = content
    .filter((r): r is Record<string, unknown> => typeof r === 'object' && r !== null && (r as { type?: unknown }).type === 'web_search_result')
    .slice(0, REPLAYED_RESULTS_MAX) // before any is opened
    .map(r => ({
      title: typeof r.title === 'string' ? r.title : '',
      url: typeof r.url === 'string' ? r.url : '',
      snippet: ctx.seal.open(ctx.accountId, r.encrypted_content, 'web_search_result') ?? '',
    }))
  return replayedResult(query, results)
}

/**
 * Client tools as the engine's tool definitions, and web_search (with a search provider) as the function chatd runs;
 * the other server tools (bash_*, web_fetch_*, …) are not offered.
 */
function toolsOf (body: MessagesRequest, searchConfigured: boolean): { tools: ToolDefinition[], toolOrigin: number[], webSearch?: WebSearchPlan } {
  const tools: ToolDefinition[] = []
  const toolOrigin: number[] = []
  let search: { plan: WebSearchPlan, index: number } | undefined
  ;(body.tools ?? []).forEach((tool, i) => {
    const at = `tools[${i}]`
    if (isWebSearch(tool)) {
      if (search !== undefined) throw invalidParam(`${at}.type`, `${at}: only one web_search tool may be offered (tools[${search.index}] is one).`)
      search = { plan: webSearchPlan(tool, i), index: i }
      return
    }
    if (isServerTool(tool)) return
    if (!TOOL_NAME_PATTERN.test(tool.name)) throw invalidParam(`${at}.name`, `${at}.name must be 1 to 128 letters, digits, _ or -.`)
    const t = tool as typeof tool & { description?: unknown; input_schema?: unknown; strict?: unknown }
    if (typeof t.input_schema !== 'object' || t.input_schema === null || Array.isArray(t.input_schema)) {
      throw invalidParam(`${at}.input_schema`, `${at}.input_schema must be a JSON Schema object.`)
    }
    if (t.description !== undefined && typeof t.description !== 'string') throw invalidParam(`${at}.description`, `${at}.description must be a string.`)
    tools.push({
      type: 'function',
      function: {
        name: tool.name,
        ...(typeof t.description === 'string' ? { description: t.description } : {}),
        parameters: t.input_schema as Record<string, unknown>,
        ...(typeof t.strict === 'boolean' ? { strict: t.strict } : {}),
      },
    })
    toolOrigin.push(i)
  })
  // A client tool of the same name wins: the hosted search is then not offered.
  if (search === undefined || !searchConfigured || tools.some(t => t.function.name === WEB_SEARCH_FUNCTION)) return { tools, toolOrigin }
  tools.push(webSearchFunction())
  toolOrigin.push(search.index)
  return { tools, toolOrigin, webSearch: search.plan }
}

function toolChoiceOf (body: MessagesRequest, tools: ToolDefinition[], searchOffered: boolean): Pick<CompletionRequest, 'toolChoice' | 'parallelToolCalls'> {
  const choice = body.tool_choice
  if (choice === undefined) return {}
  const fields: Pick<CompletionRequest, 'toolChoice' | 'parallelToolCalls'> = {}
  if (choice.disable_parallel_tool_use === true) fields.parallelToolCalls = false
  if (choice.type === 'tool') {
    if (choice.name === undefined) throw invalidParam('tool_choice.name', 'tool_choice of type tool needs the name of the tool.')
    if (!tools.some(t => t.function.name === choice.name)) {
      const server = (body.tools ?? []).find(t => t.name === choice.name && isServerTool(t))
      if (server && isWebSearch(server) && !searchOffered) {
        throw new ApiError('search_unavailable', `tool_choice forces the server tool '${choice.name}' (${server.type}), but no search provider is configured on this server.`, { param: 'tool_choice' })
      }
      if (server) throw invalidParam('tool_choice.name', `tool_choice forces '${choice.name}', a server tool (${server.type}) this server does not run.`)
      throw invalidParam('tool_choice.name', `tool_choice names '${choice.name}', which is not among the tools.`)
    }
    fields.toolChoice = { type: 'function', function: { name: choice.name } }
  } else if (choice.type === 'any') {
    if (tools.length === 0) {
      const server = (body.tools ?? []).find(isServerTool)
      throw invalidParam('tool_choice', server
        ? `tool_choice any would force a server tool (${server.type}) this server does not run; offer a client tool.`
        : 'tool_choice any needs tools.')
    }
    fields.toolChoice = 'required'
  } else if (tools.length > 0) {
    fields.toolChoice = choice.type
  }
  return fields
}

/** thinking and output_config.effort -> the reasoning effort (how long a reasoning model may think). */
function reasoningOf (body: MessagesRequest): Pick<CompletionRequest, 'reasoningEffort'> {
  const thinking = body.thinking
  if (thinking?.type === 'disabled') return { reasoningEffort: 'none' }
  if (thinking?.type === 'enabled' && thinking.budget_tokens !== undefined) {
    const budget = thinking.budget_tokens
    return { reasoningEffort: budget <= 1024 ? 'low' : budget <= 4096 ? 'medium' : 'high' }
  }
  const effort = body.output_config?.effort
  if (effort === undefined) return {}
  return { reasoningEffort: effort === 'low' ? 'low' : effort === 'medium' ? 'medium' : 'high' }
}

/**
 * The Messages body's names for the pipeline's fields: message k is the Anthropic message it came
 * from (its content: one Anthropic message may make several), or `system`; tool k the Anthropic
 * tool, whose parameters are its input_schema.
 */
function messagesFields (messageOrigin: number[], toolOrigin: number[]): FieldTable {
  return {
    renamed: {
      stop: 'stop_sequences',
      response_format: 'output_config.format',
      'response_format.json_schema': 'output_config.format',
      parallel_tool_calls: 'tool_choice.disable_parallel_tool_use',
      reasoning_effort: 'thinking',
    },
    message: at => {
      const origin = messageOrigin[at.index]
      return origin === undefined ? `messages[${at.index}]` : origin < 0 ? 'system' : `messages[${origin}].content`
    },
    tool: at => `tools[${toolOrigin[at.index] ?? at.index}]${at.part === 'parameters' ? '.input_schema' : at.part ? `.${at.part}` : ''}`,
  }
}
