// Separates an R1-style model's thinking from its answer while the text streams.
//
// DeepSeek-R1 and its distills write `<think>`, their thinking, `</think>`, then
// the answer; their chat template usually writes the opening `<think>` into the
// prompt itself, so the output may carry only the closing tag. Text arrives in
// pieces (tokens, upstream chunks) and a tag may be split across any of them, so
// the splitter holds back a piece's tail while it could still be the start of a
// tag, and releases it once the next piece (or flush) settles the question.
//
// The model gets one thinking block: text is answer until the model opens
// `<think>` (or from the start, when the prompt left one open), thinking until
// `</think>`, and answer for the rest; a `<think>` written inside the answer is
// left alone. A model that never closes the block has thought the whole time.

import type { DeltaLogprobs, GenerateEvent } from './backend.ts'
import type { ReasoningMode } from './models-file.ts'

const OPEN = '<think>'
const CLOSE = '</think>'

/** What one push() or flush() releases. Within one result the reasoning comes first in the stream, the content after it. */
export interface SplitText {
  content: string
  reasoning: string
}

type Phase = 'before' | 'thinking' | 'after'

export class ReasoningSplitter {
  #phase: Phase
  /** Text received but not yet released: a possible partial tag, or what followed an opening tag in a piece that began with answer text. */
  #pending = ''

  /**
   * @param startsInReasoning true only when the rendered prompt ends inside an open
   * `<think>` block (the chat template opened it), so the output starts as thinking.
   */
  constructor (startsInReasoning: boolean) {
    this.#phase = startsInReasoning ? 'thinking' : 'before'
  }

  /** True while the text being received is thinking. */
  get inReasoning (): boolean {
    return this.#phase === 'thinking'
  }

  /** Characters received and not yet released (a possible partial tag, or text waiting behind an opening tag). */
  get heldLength (): number {
    return this.#pending.length
  }

  /**
   * The answer has begun and no thinking block may follow: every later character is answer text,
   * `<think>` included (a constrained JSON answer may spell it inside a string). Only before any
   * thinking; what is held is released by the next push or flush.
   */
  answerOnly (): void {
    if (this.#phase === 'before') this.#phase = 'after'
  }

  /** Takes the next piece of generated text; returns what can be released now. */
  push (text: string): SplitText {
    return this.#split(this.#pending + text, false)
  }

  /** The text is complete: releases everything held back (a partial tag is plain text after all). */
  flush (): SplitText {
    return this.#split(this.#pending, true)
  }

  #split (text: string, final: boolean): SplitText {
    const out: SplitText = { content: '', reasoning: '' }
    this.#pending = ''
    let rest = text
    while (rest !== '') {
      if (this.#phase === 'after') {
        out.content += rest
        break
      }
      const tag = this.#phase === 'before' ? OPEN : CLOSE
      const field = this.#phase === 'before' ? 'content' : 'reasoning'
      const at = rest.indexOf(tag)
      if (at >= 0) {
        out[field] += rest.slice(0, at)
        rest = rest.slice(at + tag.length)
        this.#phase = this.#phase === 'before' ? 'thinking' : 'after'
        // One result says "reasoning, then content". Answer text already
        // released ahead of a thinking block would be reordered after it, so
        // what follows the opening tag waits for the next push or flush.
        // (At flush nothing is held back this way: text held so is always
        // past the opening tag, so flush never meets answer text before one.)
        if (this.#phase === 'thinking' && out.content !== '' && !final) {
          this.#pending = rest
          break
        }
        continue
      }
      const held = final ? 0 : partialTagAtEnd(rest, tag)
      out[field] += rest.slice(0, rest.length - held)
      this.#pending = rest.slice(rest.length - held)
      break
    }
    return out
  }
}

/** Length of the longest proper prefix of `tag` that `text` ends with (0 when none). */
function partialTagAtEnd (text: string, tag: string): number {
  for (let n = Math.min(tag.length - 1, text.length); n > 0; n--) {
    if (text.endsWith(tag.slice(0, n))) return n
  }
  return 0
}

/**
 * The answer part of an earlier assistant turn, as R1's template wants it back:
 * thinking removed, whether the turn kept its `<think>…</think>` block, only the
 * closing tag (the template opened the block), or an unclosed block (the model
 * was cut off while thinking: nothing of it is answer).
 */
export function stripThinking (text: string): string {
  const close = text.lastIndexOf(CLOSE)
  let answer = close >= 0 ? text.slice(close + CLOSE.length) : text
  const open = answer.indexOf(OPEN)
  if (open >= 0) answer = answer.slice(0, open)
  return answer === text ? text : answer.trim()
}

// ---------------------------------------------------------------------------
// Reasoning modes

/**
 * Applies a model's reasoning mode to a backend's events. Backends put thinking
 * in `reasoning` deltas (the ReasoningSplitter in reasoning.ts, or an upstream's
 * own reasoning field) and the answer in `content` deltas; within one delta the
 * reasoning comes first.
 * - `separate`: thinking goes on as reasoning (message.reasoning_content);
 * - `hidden`: thinking is dropped;
 * - `inline`: thinking stays in the content as the model wrote it, the block
 *   closed by `</think>` (R1's template opens it in the prompt, so the text
 *   starts without `<think>`; one is written only when answer text came first,
 *   which can only mean the model opened the block itself).
 * In `separate` and `hidden` the blank lines R1 writes between `</think>` and the
 * answer are dropped, so `content` starts with the answer itself.
 */
export async function * withReasoningMode (events: AsyncIterable<GenerateEvent>, mode: ReasoningMode): AsyncIterable<GenerateEvent> {
  let thinking = false
  let contentSeen = false
  /** After a thinking block, until the answer's first visible character. */
  let trimAnswer = false
  for await (const event of events) {
    if (event.type !== 'delta') {
      yield event
      continue
    }
    const reasoning = event.reasoning ?? ''
    let content = event.content ?? ''
    const logprobs = event.logprobs ? logprobsFor(event.logprobs, mode) : undefined
    if (mode === 'inline') {
      let text = ''
      if (reasoning !== '') {
        if (!thinking && contentSeen) text += '<think>'
        thinking = true
        text += reasoning
      }
      if (content !== '') {
        if (thinking) text += '</think>'
        thinking = false
        contentSeen = true
        text += content
      }
      if (text !== '' || logprobs || event.toolCalls) {
        yield { type: 'delta', ...(text !== '' ? { content: text } : {}), ...(logprobs ? { logprobs } : {}), ...(event.toolCalls ? { toolCalls: event.toolCalls } : {}) }
      }
      continue
    }
    if (reasoning !== '') trimAnswer = true
    if (trimAnswer && content !== '') {
      content = content.trimStart()
      if (content !== '') trimAnswer = false
    }
    const out: Extract<GenerateEvent, { type: 'delta' }> = { type: 'delta' }
    if (mode === 'separate' && reasoning !== '') out.reasoning = reasoning
    if (content !== '') out.content = content
    // Token log-probabilities travel even when their text was dropped (the blank lines after `</think>`).
    if (logprobs) out.logprobs = logprobs
    if (event.toolCalls) out.toolCalls = event.toolCalls
    if (out.reasoning !== undefined || out.content !== undefined || out.logprobs !== undefined || out.toolCalls !== undefined) yield out
  }
}

/**
 * A delta's token log-probabilities as the mode shows the text: `separate` keeps the thinking's
 * tokens apart, `inline` puts them in the content before the answer's (as the text is), `hidden`
 * drops them. Undefined when nothing is left.
 */
function logprobsFor (logprobs: DeltaLogprobs, mode: ReasoningMode): DeltaLogprobs | undefined {
  const shown = mode === 'separate'
    ? logprobs
    : mode === 'inline'
      ? { content: [...logprobs.reasoning, ...logprobs.content], reasoning: [] }
      : { content: logprobs.content, reasoning: [] }
  return shown.content.length > 0 || shown.reasoning.length > 0 ? shown : undefined
}
