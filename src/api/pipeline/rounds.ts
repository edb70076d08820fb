// A reply that goes on after tool calls the server runs itself (the hosted web
// search): when a generation ends in calls, the door's hook runs them, its
// events (each search) going out in the reply's stream, and hands back their
// results; the conversation grows by the calls and the results and the model
// generates again, in the same admission and usage row.
// The rounds' usage is summed into the one finish event, and every round after
// the first may use only the tokens the earlier ones left of max_tokens, and
// runs only once its conversation, sent again, is reserved in the tier's minute.

import type { ChatMessage, GenerateEvent, GenerateRequest, ToolCall, ToolChoice, Usage } from '../../engine/backend.ts'
import { assembleToolCalls } from './completion-meta.ts'
import type { CompletionEvent, SearchEvent } from './events.ts'

/** What a door hands back after running a round's calls: their results, and the next round's tool_choice. */
export interface CallResults {
  results: ChatMessage[]
  toolChoice?: ToolChoice
}

/**
 * Runs the calls of a round that ended in them, yielding what the reply's stream shows of them;
 * returns their results, or undefined: the door does not run these, the reply ends.
 */
export type ContinueAfterCalls = (calls: ToolCall[], signal: AbortSignal) => AsyncGenerator<SearchEvent, CallResults | undefined>

function addUsage (a: Usage, b: Usage): Usage {
  const cached = (a.prompt_tokens_details?.cached_tokens ?? 0) + (b.prompt_tokens_details?.cached_tokens ?? 0)
  const reasoning = (a.completion_tokens_details?.reasoning_tokens ?? 0) + (b.completion_tokens_details?.reasoning_tokens ?? 0)
  return {
    prompt_tokens: a.prompt_tokens + b.prompt_tokens,
    completion_tokens: a.completion_tokens + b.completion_tokens,
    total_tokens: a.total_tokens + b.total_tokens,
    ...(a.prompt_tokens_details || b.prompt_tokens_details ? { prompt_tokens_details: { cached_tokens: cached } } : {}),
    ...(a.completion_tokens_details || b.completion_tokens_details ? { completion_tokens_details: { reasoning_tokens: reasoning } } : {}),
  }
}

/**
 * `reserve`: asked before each round after the first, with that round's request (it sends the
 * whole conversation again): false when the tier's minute cannot hold it, and the reply ends there
 * as if cut by max_tokens.
 */
export async function * withRounds (
  first: GenerateRequest,
  generate: (request: GenerateRequest) => AsyncIterable<GenerateEvent>,
  next: ContinueAfterCalls,
  signal: AbortSignal,
  reserve: (request: GenerateRequest) => Promise<boolean> = async () => true
): AsyncIterable<CompletionEvent> {
  let request = first
  let usage: Usage | undefined
  for (;;) {
    const calls: ToolCall[] = []
    let content = ''
    let finish: Extract<GenerateEvent, { type: 'finish' }> | undefined
    for await (const event of generate(request)) {
      if (event.type === 'finish') {
        finish = event
        break
      }
      if (event.toolCalls) assembleToolCalls(calls, event.toolCalls)
      content += event.content ?? ''
      yield event
    }
    if (finish === undefined) return
    usage = usage === undefined ? finish.usage : addUsage(usage, finish.usage)
    const ranOn = calls.length > 0 && finish.reason !== 'length' && finish.reason !== 'cancelled' ? yield * next(calls, signal) : undefined
    const left = first.maxTokens === undefined ? undefined : first.maxTokens - usage.completion_tokens
    if (ranOn === undefined || (left !== undefined && left <= 0)) {
      yield { ...finish, reason: ranOn === undefined ? finish.reason : 'length', usage }
      return
    }
    request = {
      ...request,
      messages: [...request.messages, { role: 'assistant', content, toolCalls: calls }, ...ranOn.results],
      maxTokens: left,
      ...(ranOn.toolChoice !== undefined ? { toolChoice: ranOn.toolChoice } : {}),
    }
    if (!await reserve(request)) {
      yield { ...finish, reason: 'length', usage }
      return
    }
  }
}
