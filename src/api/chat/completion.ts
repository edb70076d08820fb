// Builds the response objects: the whole chat.completion for a non-streamed
// reply, and the chunks of a streamed one.

import type { DeltaLogprobs, FinishReason, GenerateEvent, TokenLogprob, ToolCall, Usage } from '../../engine/backend.ts'
import { assembleToolCalls, type CompletionMeta, type VisibleFinish } from '../pipeline/completion-meta.ts'
import type { ChatCompletion, ChatCompletionChunk, ChoiceLogprobs } from './schema.ts'

export interface CollectedCompletion {
  content: string
  reasoning: string
  finishReason: FinishReason
  usage: Usage
  /** Every token's log-probability, in order (empty unless the request asked for logprobs). */
  logprobs?: DeltaLogprobs
  /** The tool calls, assembled from their streamed pieces; absent when there are none. */
  toolCalls?: ToolCall[]
}

/** Whether a delta carries token log-probabilities (a delta may carry them without text: its tokens' text was removed, e.g. whitespace after thinking). */
export function hasLogprobs (event: Extract<GenerateEvent, { type: 'delta' }>): boolean {
  return event.logprobs !== undefined && (event.logprobs.content.length > 0 || event.logprobs.reasoning.length > 0)
}

/** Gathers a whole (non-streamed) reply from its deltas: text, thinking, log-probabilities and tool calls. */
export class CompletionCollector {
  #content = ''
  #reasoning = ''
  readonly #logprobs: DeltaLogprobs = { content: [], reasoning: [] }
  readonly #toolCalls: ToolCall[] = []

  add (event: Extract<GenerateEvent, { type: 'delta' }>): void {
    if (event.toolCalls) assembleToolCalls(this.#toolCalls, event.toolCalls)
    this.#content += event.content ?? ''
    this.#reasoning += event.reasoning ?? ''
    if (event.logprobs) {
      this.#logprobs.content.push(...event.logprobs.content)
      this.#logprobs.reasoning.push(...event.logprobs.reasoning)
    }
  }

  completed (finish: { reason: VisibleFinish; usage: Usage }): CollectedCompletion & { finishReason: VisibleFinish } {
    const toolCalls = this.#toolCalls.length > 0 ? { toolCalls: this.#toolCalls } : {}
    return { content: this.#content, reasoning: this.#reasoning, finishReason: finish.reason, usage: finish.usage, logprobs: this.#logprobs, ...toolCalls }
  }
}

/** The response's `logprobs`: the answer's tokens, and the thinking's when there are any. */
function choiceLogprobs (logprobs: DeltaLogprobs | undefined): ChoiceLogprobs {
  const content: TokenLogprob[] = logprobs?.content ?? []
  const reasoning: TokenLogprob[] = logprobs?.reasoning ?? []
  return reasoning.length > 0 ? { content, reasoning_content: reasoning } : { content }
}

/** `withLogprobs`: the request asked for logprobs, so the choice carries them. */
export function completionBody (meta: CompletionMeta, done: CollectedCompletion & { finishReason: VisibleFinish }, withLogprobs = false): ChatCompletion {
  return {
    id: meta.id,
    object: 'chat.completion',
    created: meta.created,
    model: meta.model,
    system_fingerprint: meta.systemFingerprint,
    choices: [{
      index: 0,
      message: {
        role: 'assistant',
        // A reply that is only tool calls has no text: null, as OpenAI sends it.
        content: done.toolCalls && done.content === '' ? null : done.content,
        ...(done.reasoning === '' ? {} : { reasoning_content: done.reasoning }),
        ...(done.toolCalls ? { tool_calls: done.toolCalls } : {}),
      },
      ...(withLogprobs ? { logprobs: choiceLogprobs(done.logprobs) } : {}),
      finish_reason: done.finishReason,
    }],
    usage: done.usage,
    ...(meta.searchResults ? { search_results: meta.searchResults } : {}),
  }
}

/**
 * Chunk builders, in stream order. `withUsageField` puts `usage: null` on every chunk but the last,
 * as OpenAI does with include_usage; `withLogprobs` gives each delta chunk the `logprobs` of the
 * tokens whose text it carries.
 */
export function chunkMaker (meta: CompletionMeta, withUsageField: boolean, withLogprobs = false) {
  const base = (choices: ChatCompletionChunk['choices']): ChatCompletionChunk => ({
    id: meta.id,
    object: 'chat.completion.chunk',
    created: meta.created,
    model: meta.model,
    system_fingerprint: meta.systemFingerprint,
    choices,
    ...(withUsageField ? { usage: null } : {}),
  })
  return {
    role: () => ({
      ...base([{ index: 0, delta: { role: 'assistant', content: '' }, finish_reason: null }]),
      ...(meta.searchResults ? { search_results: meta.searchResults } : {}),
    }),
    delta: (event: Extract<GenerateEvent, { type: 'delta' }>) => {
      const delta: ChatCompletionChunk['choices'][number]['delta'] = {}
      if (event.reasoning) delta.reasoning_content = event.reasoning
      if (event.content) delta.content = event.content
      if (event.toolCalls) {
        delta.tool_calls = event.toolCalls.map(piece => ({
          index: piece.index,
          ...(piece.id !== undefined ? { id: piece.id, type: 'function' as const } : {}),
          function: { ...(piece.name !== undefined ? { name: piece.name } : {}), ...(piece.arguments !== undefined ? { arguments: piece.arguments } : {}) },
        }))
      }
      if (withLogprobs) return base([{ index: 0, delta, logprobs: choiceLogprobs(event.logprobs), finish_reason: null }])
      return base([{ index: 0, delta, finish_reason: null }])
    },
    finish: (reason: VisibleFinish) => base([{ index: 0, delta: {}, finish_reason: reason }]),
    usage: (usage: Usage) => ({ ...base([]), usage }),
  }
}
