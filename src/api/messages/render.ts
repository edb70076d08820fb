// The completion's events in Anthropic's shapes: one message (non-streamed),
// or the stream's events (message_start, content_block_start/delta/stop,
// message_delta, message_stop). Both are made by one block builder, so the
// stream's deltas add up to the whole message. Thinking blocks carry the
// thinking sealed for the account as their `signature` (reasoning-seal.ts):
// chatd can read it back, nobody else can, and another account's does not open.
// Each hosted web search the reply runs (a `search` event of the stream,
// ../pipeline/events.ts) is a server_tool_use block and its
// web_search_tool_result, between the rounds' text; the model's calls to the
// search function are never shown as tool_use.

import { randomBytes } from 'node:crypto'
import type { FinishReason, GenerateEvent, ToolCallDelta, Usage } from '../../engine/backend.ts'
import type { SearchEvent } from '../pipeline/events.ts'
import { WEB_SEARCH_FUNCTION } from '../pipeline/hosted-search.ts'
import type { ReasoningSeal } from '../reasoning-seal.ts'
import type { AnthropicMessage, AnthropicUsage, ResponseBlock, StopReason } from './schema.ts'

export function newMessageId (): string {
  return 'msg_' + randomBytes(18).toString('base64url')
}

function serverToolUseId (): string {
  return 'srvtoolu_' + randomBytes(12).toString('base64url')
}

/** A tool call's id as Anthropic's clients expect it (toolu_…); sent back, it is the call's id as is. */
export function toolUseId (id: string): string {
  return id.startsWith('toolu_') ? id : `toolu_${id}`
}

/** `stopSequence`: the stop string that ended the reply, when the backend says which (finish event). */
export function stopReason (reason: Exclude<FinishReason, 'cancelled'>, madeCalls: boolean, stopSequence?: string): StopReason {
  if (reason === 'length') return 'max_tokens'
  if (reason === 'tool_calls' || madeCalls) return 'tool_use'
  return stopSequence !== undefined ? 'stop_sequence' : 'end_turn'
}

/** Anthropic's input_tokens leaves out the tokens read from the cache (they are cache_read_input_tokens). */
export function anthropicUsage (usage: Usage | undefined, webSearches = 0): AnthropicUsage {
  const prompt = usage?.prompt_tokens ?? 0
  const cached = Math.min(usage?.prompt_tokens_details?.cached_tokens ?? 0, prompt)
  return {
    input_tokens: prompt - cached,
    output_tokens: usage?.completion_tokens ?? 0,
    cache_read_input_tokens: cached,
    cache_creation_input_tokens: 0,
    ...(webSearches > 0 ? { server_tool_use: { web_search_requests: webSearches } } : {}),
  }
}

/** A tool call's arguments as the `input` object (a cut or malformed call: the object it parses to, or {}). */
export function toolInput (args: string): Record<string, unknown> {
  try {
    const value: unknown = JSON.parse(args === '' ? '{}' : args)
    return typeof value === 'object' && value !== null && !Array.isArray(value) ? value as Record<string, unknown> : {}
  } catch {
    return {}
  }
}

export interface RenderContext {
  id: string
  model: string
  accountId: string | number
  seal: ReasoningSeal
  thinkingDisplay: 'summarized' | 'omitted'
  /** chatd runs the model's web_search calls: they are shown as server tool blocks, never as tool_use. */
  hostedSearch?: boolean
}

/** One streamed event, named as its `type`. */
export interface StreamEvent { type: string; [field: string]: unknown }

type OpenBlock =
  | { kind: 'thinking'; index: number; text: string }
  | { kind: 'text'; index: number; text: string }
  | { kind: 'tool_use'; index: number; call: number; id: string; name: string; args: string }

/**
 * Turns GenerateEvents into Anthropic's stream events, and keeps the blocks they add up to. A
 * block opens when its kind changes (thinking, text, or a tool call of another index); a tool
 * call's block opens once its name is known, with the arguments so far as its first delta.
 */
export class MessageBuilder {
  readonly #ctx: RenderContext
  readonly blocks: ResponseBlock[] = []
  #open: OpenBlock | undefined
  /** A call whose id came before its name: held until the name is known. */
  #pending: { call: number; id: string; name: string; args: string } | undefined
  #madeCalls = false
  /** This round's calls to the hosted search, by index: not shown as they stream. */
  readonly #searchCalls = new Set<number>()
  #searchCallsSeen = false
  #searches = 0
  /** Each search's server_tool_use id, by the model's call id: its result answers it. */
  readonly #searchIds = new Map<string, string>()

  constructor (ctx: RenderContext) {
    this.#ctx = ctx
  }

  get id (): string {
    return this.#ctx.id
  }

  get model (): string {
    return this.#ctx.model
  }

  /** The model's id as the registry names it (known once the completion started). */
  set model (id: string) {
    this.#ctx.model = id
  }

  /** A block shown whole: its start and stop (a server_tool_use's input as one input_json_delta, as Anthropic streams it). */
  #whole (block: ResponseBlock, out: StreamEvent[]): void {
    const index = this.blocks.length
    this.blocks.push(block)
    if (block.type === 'server_tool_use') {
      out.push({ type: 'content_block_start', index, content_block: { ...block, input: {} } })
      out.push({ type: 'content_block_delta', index, delta: { type: 'input_json_delta', partial_json: JSON.stringify(block.input) } })
    } else {
      out.push({ type: 'content_block_start', index, content_block: block })
    }
    out.push({ type: 'content_block_stop', index })
  }

  /** The round that asked for searches ended: its open block closes, and the next round's calls number from 0. */
  #endRound (out: StreamEvent[]): void {
    this.#flushPending(out)
    this.#close(out)
    this.#searchCalls.clear()
  }

  /**
   * The stream events for a hosted search: its server_tool_use block as it starts, its
   * web_search_tool_result when it is done (or failed); one not run, both at once, its result an
   * error saying why.
   */
  search (event: SearchEvent): StreamEvent[] {
    const out: StreamEvent[] = []
    if (event.status === 'searching' || event.status === 'refused') {
      this.#endRound(out)
      const id = serverToolUseId()
      const input = event.status === 'searching' ? { query: event.query } : toolInput(event.call.function.arguments)
      this.#whole({ type: 'server_tool_use', id, name: 'web_search', input }, out)
      if (event.status === 'searching') this.#searchIds.set(event.call.id, id)
      else this.#whole({ type: 'web_search_tool_result', tool_use_id: id, content: { type: 'web_search_tool_result_error', error_code: event.why } }, out)
      return out
    }
    const id = this.#searchIds.get(event.call.id)
    if (id === undefined) return out
    this.#searchIds.delete(event.call.id)
    if (event.status === 'done') this.#searches++
    const content = event.status === 'failed'
      ? { type: 'web_search_tool_result_error' as const, error_code: 'unavailable' as const }
      // The result's text goes sealed, as Anthropic's does: sent back on a later turn, it reaches the model again.
      : event.results.map(r => ({ type: 'web_search_result' as const, url: r.url, title: r.title, page_age: null, encrypted_content: this.#ctx.seal.seal(this.#ctx.accountId, r.snippet, 'web_search_result') }))
    this.#whole({ type: 'web_search_tool_result', tool_use_id: id, content }, out)
    return out
  }

  /** A reply whose last round asked only for searches chatd did not run ends as a turn, not for the client's tools. */
  #shownReason (reason: Exclude<FinishReason, 'cancelled'>): Exclude<FinishReason, 'cancelled'> {
    return reason === 'tool_calls' && !this.#madeCalls && this.#searchCallsSeen ? 'stop' : reason
  }

  start (): StreamEvent {
    const { id, model } = this.#ctx
    return { type: 'message_start', message: { id, type: 'message', role: 'assistant', model, content: [], stop_reason: null, stop_sequence: null, usage: anthropicUsage(undefined) } }
  }

  /** The stream events for one delta (none for an empty one). */
  delta (event: Extract<GenerateEvent, { type: 'delta' }>): StreamEvent[] {
    const out: StreamEvent[] = []
    if (event.reasoning) {
      if (this.#open?.kind !== 'thinking') {
        this.#close(out)
        this.#open = { kind: 'thinking', index: this.blocks.length, text: '' }
        this.blocks.push({ type: 'thinking', thinking: '', signature: '' })
        out.push({ type: 'content_block_start', index: this.#open.index, content_block: { type: 'thinking', thinking: '', signature: '' } })
      }
      this.#open.text += event.reasoning
      if (this.#ctx.thinkingDisplay !== 'omitted') {
        (this.blocks[this.#open.index] as { thinking: string }).thinking += event.reasoning
        out.push({ type: 'content_block_delta', index: this.#open.index, delta: { type: 'thinking_delta', thinking: event.reasoning } })
      }
    }
    if (event.content) {
      if (this.#open?.kind !== 'text') {
        this.#close(out)
        this.#open = { kind: 'text', index: this.blocks.length, text: '' }
        this.blocks.push({ type: 'text', text: '' })
        out.push({ type: 'content_block_start', index: this.#open.index, content_block: { type: 'text', text: '' } })
      }
      this.#open.text += event.content;
      (this.blocks[this.#open.index] as { text: string }).text += event.content
      out.push({ type: 'content_block_delta', index: this.#open.index, delta: { type: 'text_delta', text: event.content } })
    }
    for (const piece of event.toolCalls ?? []) this.#toolPiece(piece, out)
    return out
  }

  /** The closing events: the last block's stop, message_delta with the stop reason and usage, message_stop. */
  finish (reason: Exclude<FinishReason, 'cancelled'>, usage: Usage, stopSequence?: string): StreamEvent[] {
    const out: StreamEvent[] = []
    this.#flushPending(out)
    this.#close(out)
    out.push({ type: 'message_delta', delta: { stop_reason: stopReason(this.#shownReason(reason), this.#madeCalls, stopSequence), stop_sequence: stopSequence ?? null }, usage: anthropicUsage(usage, this.#searches) })
    out.push({ type: 'message_stop' })
    return out
  }

  /** The whole message the events so far add up to (call after `finish`). */
  message (reason: Exclude<FinishReason, 'cancelled'>, usage: Usage, stopSequence?: string): AnthropicMessage {
    const { id, model } = this.#ctx
    return { id, type: 'message', role: 'assistant', model, content: this.blocks, stop_reason: stopReason(this.#shownReason(reason), this.#madeCalls, stopSequence), stop_sequence: stopSequence ?? null, usage: anthropicUsage(usage, this.#searches) }
  }

  #toolPiece (piece: ToolCallDelta, out: StreamEvent[]): void {
    if (this.#searchCalls.has(piece.index)) return
    const open = this.#open
    if (open?.kind === 'tool_use' && open.call === piece.index) {
      if (piece.arguments) {
        open.args += piece.arguments
        out.push({ type: 'content_block_delta', index: open.index, delta: { type: 'input_json_delta', partial_json: piece.arguments } })
      }
      return
    }
    let pending = this.#pending
    if (pending === undefined || pending.call !== piece.index) {
      this.#flushPending(out)
      pending = this.#pending = { call: piece.index, id: '', name: '', args: '' }
    }
    if (piece.id !== undefined) pending.id = piece.id
    if (piece.name !== undefined) pending.name += piece.name
    if (piece.arguments !== undefined) pending.args += piece.arguments
    if (pending.name !== '') this.#flushPending(out)
  }

  /** Opens the held call's block (its arguments so far as one delta). */
  #flushPending (out: StreamEvent[]): void {
    const pending = this.#pending
    if (pending === undefined) return
    this.#pending = undefined
    if (this.#ctx.hostedSearch === true && pending.name === WEB_SEARCH_FUNCTION) {
      this.#searchCalls.add(pending.call)
      this.#searchCallsSeen = true
      return
    }
    this.#close(out)
    this.#madeCalls = true
    const id = toolUseId(pending.id === '' ? `call_${this.blocks.length}` : pending.id)
    const open: OpenBlock = { kind: 'tool_use', index: this.blocks.length, call: pending.call, id, name: pending.name, args: '' }
    this.#open = open
    this.blocks.push({ type: 'tool_use', id, name: pending.name, input: {} })
    out.push({ type: 'content_block_start', index: open.index, content_block: { type: 'tool_use', id, name: pending.name, input: {} } })
    if (pending.args !== '') {
      open.args = pending.args
      out.push({ type: 'content_block_delta', index: open.index, delta: { type: 'input_json_delta', partial_json: pending.args } })
    }
  }

  #close (out: StreamEvent[]): void {
    const open = this.#open
    if (open === undefined) return
    this.#open = undefined
    if (open.kind === 'thinking') {
      const signature = this.#ctx.seal.seal(this.#ctx.accountId, open.text)
      ;(this.blocks[open.index] as { signature: string }).signature = signature
      out.push({ type: 'content_block_delta', index: open.index, delta: { type: 'signature_delta', signature } })
    } else if (open.kind === 'tool_use') {
      (this.blocks[open.index] as { input: unknown }).input = toolInput(open.args)
    }
    out.push({ type: 'content_block_stop', index: open.index })
  }
}
