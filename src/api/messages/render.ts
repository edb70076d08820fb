// The completion's events in Anthropic's shapes: one message (non-streamed),
// or the stream's events (message_start, content_block_start/delta/stop,
// message_delta, message_stop). Both are made by one block builder, so the
// stream's deltas add up to the whole message. Thinking blocks carry the
// thinking sealed for the account as their `signature` (reasoning-seal.ts):
// chatd can read it back, nobody else can, and another account's does not open.

import { randomBytes } from 'node:crypto'
import type { FinishReason, GenerateEvent, ToolCallDelta, Usage } from '../../engine/backend.ts'
import type { SearchDone } from '../chat/generate-request.ts'
import type { ReasoningSeal } from '../reasoning-seal.ts'
import type { AnthropicMessage, AnthropicUsage, ResponseBlock, StopReason } from './schema.ts'

export function newMessageId (): string {
  return 'msg_' + randomBytes(18).toString('base64url')
}

/** A tool call's id as Anthropic's clients expect it (toolu_…); sent back, it is the chat call's id as is. */
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
  #searches = 0

  constructor (ctx: RenderContext) {
    this.#ctx = ctx
  }

  /**
   * The web search chatd ran for the request (the web_search server tool), as Anthropic shows a
   * server tool's turn: a server_tool_use block with the query, then its web_search_tool_result.
   */
  searched (search: SearchDone): StreamEvent[] {
    this.#searches++
    const id = 'srvtoolu_' + randomBytes(12).toString('base64url')
    const use: ResponseBlock = { type: 'server_tool_use', id, name: 'web_search', input: { query: search.query } }
    const result: ResponseBlock = {
      type: 'web_search_tool_result',
      tool_use_id: id,
      content: search.results.map(r => ({ type: 'web_search_result', url: r.url, title: r.title, page_age: null, encrypted_content: '' })),
    }
    const out: StreamEvent[] = []
    for (const block of [use, result]) {
      const index = this.blocks.length
      this.blocks.push(block)
      out.push({ type: 'content_block_start', index, content_block: block }, { type: 'content_block_stop', index })
    }
    return out
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
    out.push({ type: 'message_delta', delta: { stop_reason: stopReason(reason, this.#madeCalls, stopSequence), stop_sequence: stopSequence ?? null }, usage: anthropicUsage(usage, this.#searches) })
    out.push({ type: 'message_stop' })
    return out
  }

  /** The whole message the events so far add up to (call after `finish`). */
  message (reason: Exclude<FinishReason, 'cancelled'>, usage: Usage, stopSequence?: string): AnthropicMessage {
    const { id, model } = this.#ctx
    return { id, type: 'message', role: 'assistant', model, content: this.blocks, stop_reason: stopReason(reason, this.#madeCalls, stopSequence), stop_sequence: stopSequence ?? null, usage: anthropicUsage(usage, this.#searches) }
  }

  #toolPiece (piece: ToolCallDelta, out: StreamEvent[]): void {
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
