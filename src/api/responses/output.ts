// The Responses API's output, built from the generation's events: the output
// items (reasoning, message, function_call, web_search_call) and the typed
// stream events that describe them as they grow. A non-streamed response runs
// the same assembler and drops the events, so the streamed deltas add up to the
// JSON response by construction.

import type { FinishReason, GenerateEvent, Usage } from '../../engine/backend.ts'
import type { SearchEvent } from '../pipeline/events.ts'
import { newId } from './ids.ts'
import type { ResponsesRequest } from './schema.ts'
import type { CallTarget } from './tools.ts'

export type OutputItem = Record<string, unknown> & { id: string; type: string }
/** A stream event without its sequence_number (the writer numbers them). */
export type StreamEvent = Record<string, unknown> & { type: string }

export interface ResponseUsage {
  input_tokens: number
  input_tokens_details: { cached_tokens: number }
  output_tokens: number
  output_tokens_details: { reasoning_tokens: number }
  total_tokens: number
}

export function responseUsage (usage: Usage): ResponseUsage {
  return {
    input_tokens: usage.prompt_tokens,
    input_tokens_details: { cached_tokens: usage.prompt_tokens_details?.cached_tokens ?? 0 },
    output_tokens: usage.completion_tokens,
    output_tokens_details: { reasoning_tokens: usage.completion_tokens_details?.reasoning_tokens ?? 0 },
    total_tokens: usage.total_tokens,
  }
}

/** The response object before any output: what the request asked for, echoed as OpenAI does. */
export function responseShell (body: ResponsesRequest, opts: { id: string; createdAt: number; model: string; store: boolean }): Record<string, unknown> {
  const format = body.text?.format ?? { type: 'text' }
  return {
    id: opts.id,
    object: 'response',
    created_at: opts.createdAt,
    status: 'in_progress',
    background: false,
    completed_at: null,
    error: null,
    incomplete_details: null,
    instructions: body.instructions ?? null,
    max_output_tokens: body.max_output_tokens ?? null,
    max_tool_calls: body.max_tool_calls ?? null,
    model: opts.model,
    output: [],
    parallel_tool_calls: body.parallel_tool_calls ?? true,
    previous_response_id: body.previous_response_id ?? null,
    prompt_cache_key: body.prompt_cache_key ?? null,
    reasoning: { effort: body.reasoning?.effort ?? null, summary: body.reasoning?.summary ?? null },
    safety_identifier: body.safety_identifier ?? null,
    service_tier: 'default',
    store: opts.store,
    temperature: body.temperature ?? 1,
    text: { format, verbosity: body.text?.verbosity ?? 'medium' },
    tool_choice: body.tool_choice ?? 'auto',
    tools: body.tools ?? [],
    top_logprobs: body.top_logprobs ?? 0,
    top_p: body.top_p ?? 1,
    truncation: body.truncation ?? 'disabled',
    usage: null,
    user: body.user ?? null,
    metadata: body.metadata ?? {},
  }
}

interface OpenCall {
  item?: OutputItem
  outputIndex: number
  callId: string
  name: string
  arguments: string
  /** A call to chatd's own web_search: never shown as a function_call. */
  hosted: boolean
}

interface OpenText {
  item: OutputItem
  outputIndex: number
  text: string
}

export interface AssemblerOptions {
  /** Receives each stream event in order; a non-streamed response passes none. */
  emit?: (event: StreamEvent) => Promise<void>
  /** Chat function name -> how its calls are returned. */
  targets: Map<string, CallTarget>
  /** Seals the thinking for a reasoning item's encrypted_content; absent: no encrypted_content. */
  seal?: (thinking: string) => string
}

export class OutputAssembler {
  readonly output: OutputItem[] = []
  readonly #opts: AssemblerOptions
  #reasoning?: OpenText
  #message?: OpenText
  /** This round's calls by their index in the generation (each round of a hosted search numbers from 0). */
  #calls = new Map<number, OpenCall>()
  #shownCalls = 0
  /** The web_search_call items of the searches running, by the model's call id. */
  readonly #searches = new Map<string, { item: OutputItem; outputIndex: number }>()

  constructor (opts: AssemblerOptions) {
    this.#opts = opts
  }

  async #emit (event: StreamEvent): Promise<void> {
    await this.#opts.emit?.(event)
  }

  #add (item: OutputItem): number {
    this.output.push(item)
    return this.output.length - 1
  }

  async delta (event: Extract<GenerateEvent, { type: 'delta' }>): Promise<void> {
    if (event.reasoning) await this.#thinking(event.reasoning)
    if (event.content) await this.#text(event.content)
    for (const piece of event.toolCalls ?? []) {
      let call = this.#calls.get(piece.index)
      if (call === undefined) {
        await this.#closeText('completed')
        call = { outputIndex: -1, callId: '', name: '', arguments: '', hosted: false }
        this.#calls.set(piece.index, call)
      }
      if (piece.id !== undefined) call.callId = piece.id
      if (piece.name !== undefined) call.name += piece.name
      if (piece.arguments !== undefined && piece.arguments !== '') {
        call.arguments += piece.arguments
        // The name is whole once the arguments start: the item can be shown now.
        if (call.item === undefined && !call.hosted) await this.#startCall(call)
        if (call.item !== undefined) {
          await this.#emit({ type: 'response.function_call_arguments.delta', item_id: call.item.id, output_index: call.outputIndex, delta: piece.arguments })
        }
      }
    }
  }

  async #thinking (text: string): Promise<void> {
    if (this.#message) await this.#closeMessage('completed')
    if (!this.#reasoning) {
      const item: OutputItem = { id: newId('rs'), type: 'reasoning', summary: [] }
      this.#reasoning = { item, outputIndex: this.#add(item), text: '' }
      await this.#emit({ type: 'response.output_item.added', output_index: this.#reasoning.outputIndex, item: { ...item, summary: [] } })
      await this.#emit({ type: 'response.reasoning_summary_part.added', item_id: item.id, output_index: this.#reasoning.outputIndex, summary_index: 0, part: { type: 'summary_text', text: '' } })
    }
    this.#reasoning.text += text
    await this.#emit({ type: 'response.reasoning_summary_text.delta', item_id: this.#reasoning.item.id, output_index: this.#reasoning.outputIndex, summary_index: 0, delta: text })
  }

  async #text (text: string): Promise<void> {
    if (this.#reasoning) await this.#closeReasoning()
    if (!this.#message) await this.#openMessage()
    this.#message!.text += text
    const { item, outputIndex } = this.#message!
    await this.#emit({ type: 'response.output_text.delta', item_id: item.id, output_index: outputIndex, content_index: 0, delta: text, logprobs: [] })
  }

  async #openMessage (): Promise<void> {
    const item: OutputItem = { id: newId('msg'), type: 'message', status: 'in_progress', role: 'assistant', content: [] }
    this.#message = { item, outputIndex: this.#add(item), text: '' }
    await this.#emit({ type: 'response.output_item.added', output_index: this.#message.outputIndex, item: { ...item, content: [] } })
    await this.#emit({ type: 'response.content_part.added', item_id: item.id, output_index: this.#message.outputIndex, content_index: 0, part: { type: 'output_text', text: '', annotations: [], logprobs: [] } })
  }

  async #closeReasoning (): Promise<void> {
    const open = this.#reasoning
    if (!open) return
    this.#reasoning = undefined
    const part = { type: 'summary_text', text: open.text }
    const base = { item_id: open.item.id, output_index: open.outputIndex, summary_index: 0 }
    await this.#emit({ type: 'response.reasoning_summary_text.done', ...base, text: open.text })
    await this.#emit({ type: 'response.reasoning_summary_part.done', ...base, part })
    open.item.summary = [part]
    if (this.#opts.seal) open.item.encrypted_content = this.#opts.seal(open.text)
    await this.#emit({ type: 'response.output_item.done', output_index: open.outputIndex, item: open.item })
  }

  async #closeMessage (status: 'completed' | 'incomplete'): Promise<void> {
    const open = this.#message
    if (!open) return
    this.#message = undefined
    const part = { type: 'output_text', text: open.text, annotations: [], logprobs: [] }
    const base = { item_id: open.item.id, output_index: open.outputIndex, content_index: 0 }
    await this.#emit({ type: 'response.output_text.done', ...base, text: open.text, logprobs: [] })
    await this.#emit({ type: 'response.content_part.done', ...base, part })
    open.item.status = status
    open.item.content = [part]
    await this.#emit({ type: 'response.output_item.done', output_index: open.outputIndex, item: open.item })
  }

  async #closeText (status: 'completed' | 'incomplete'): Promise<void> {
    await this.#closeReasoning()
    await this.#closeMessage(status)
  }

  async #startCall (call: OpenCall): Promise<void> {
    const target = this.#opts.targets.get(call.name)
    if (target !== undefined && 'hosted' in target) {
      call.hosted = true
      return
    }
    const item: OutputItem = {
      id: newId('fc'),
      type: 'function_call',
      status: 'in_progress',
      arguments: '',
      call_id: call.callId || newId('call'),
      name: target?.name ?? call.name,
      ...(target?.namespace !== undefined ? { namespace: target.namespace } : {}),
    }
    call.item = item
    call.outputIndex = this.#add(item)
    this.#shownCalls++
    await this.#emit({ type: 'response.output_item.added', output_index: call.outputIndex, item: { ...item } })
  }

  async #closeCalls (status: 'completed' | 'incomplete'): Promise<void> {
    for (const call of this.#calls.values()) {
      if (call.item === undefined && !call.hosted) await this.#startCall(call)
      if (call.item === undefined) continue
      call.item.arguments = call.arguments
      call.item.status = status
      await this.#emit({ type: 'response.function_call_arguments.done', item_id: call.item.id, output_index: call.outputIndex, name: call.item.name, arguments: call.arguments })
      await this.#emit({ type: 'response.output_item.done', output_index: call.outputIndex, item: call.item })
    }
    this.#calls = new Map()
  }

  /**
   * A hosted search: as it starts, the round that asked for it closes (its calls number from 0
   * again in the next) and a web_search_call item opens; when it is done it closes, `completed`
   * with its sources or `failed`. A search not run is not shown.
   */
  async search (event: SearchEvent): Promise<void> {
    if (event.status === 'refused') return
    if (event.status === 'searching') {
      await this.#closeText('completed')
      await this.#closeCalls('completed')
      const item: OutputItem = { id: newId('ws'), type: 'web_search_call', status: 'in_progress', action: { type: 'search', query: event.query } }
      const outputIndex = this.#add(item)
      this.#searches.set(event.call.id, { item, outputIndex })
      await this.#emit({ type: 'response.output_item.added', output_index: outputIndex, item: { ...item } })
      await this.#emit({ type: 'response.web_search_call.in_progress', item_id: item.id, output_index: outputIndex })
      await this.#emit({ type: 'response.web_search_call.searching', item_id: item.id, output_index: outputIndex })
      return
    }
    const open = this.#searches.get(event.call.id)
    if (open === undefined) return
    this.#searches.delete(event.call.id)
    const { item, outputIndex } = open
    item.status = event.status === 'done' ? 'completed' : 'failed'
    if (event.status === 'done') {
      item.action = { type: 'search', query: event.query, sources: event.results.map(r => ({ type: 'url', url: r.url })) }
      await this.#emit({ type: 'response.web_search_call.completed', item_id: item.id, output_index: outputIndex })
    }
    await this.#emit({ type: 'response.output_item.done', output_index: outputIndex, item })
  }

  /** The generation finished: every open item closes (incomplete when it ran out of tokens). */
  async finish (reason: Exclude<FinishReason, 'cancelled'>): Promise<void> {
    const status = reason === 'length' ? 'incomplete' : 'completed'
    await this.#closeReasoning()
    await this.#closeMessage(status)
    await this.#closeCalls(status)
    // A reply with nothing to show still has its (empty) message, as clients read output_text from one.
    if (this.#shownCalls === 0 && !this.output.some(item => item.type === 'message')) {
      await this.#openMessage()
      await this.#closeMessage(status)
    }
  }
}
