// One streamed chat completion as a load client sees it: the status, the
// Retry-After and error body of a refusal, time to first text, and whether the
// stream was well-formed (role chunk first, chunks of one id, a finish_reason,
// then `data: [DONE]` as the very last frame). Can give up on purpose after a
// number of bytes or milliseconds, to play a client that disconnects.

import { createParser } from 'eventsource-parser'

export interface StreamOutcome {
  /** The HTTP status; null when no response head arrived (refused connection, socket error, or our own abort). */
  status: number | null
  retryAfter: string | null
  /** The JSON body of a non-200 response. */
  errorBody?: unknown
  /** From sending to the first chunk that carried text. */
  ttftMs?: number
  /** From sending to the end of the body (or the abort). */
  latencyMs: number
  /** `data:` frames received, [DONE] included. */
  frames: number
  bytes: number
  /** Saw `data: [DONE]` as the last frame. */
  done: boolean
  /** Why the stream is not well-formed; undefined when it is (or was cut short by our own abort). */
  malformed?: string
  /** An `{"error":...}` frame the server sent mid-stream. */
  errorEvent?: unknown
  completionTokens?: number
  finishReason?: string
  /** A network failure that was not our own abort. */
  networkError?: string
  /** We gave up on purpose before the end. */
  aborted: boolean
}

export interface StreamRequest {
  base: string
  key: string
  body: Record<string, unknown>
  /** Abort once this many body bytes have arrived (0: as soon as the head arrives). */
  abortAfterBytes?: number
  /** Abort this many milliseconds after sending, whatever has arrived. */
  abortAfterMs?: number
  /** Told the status as soon as the response head arrives. */
  onHeaders?: (status: number) => void
}

interface ChunkShape {
  id?: string
  object?: string
  choices?: Array<{ delta?: { role?: string; content?: string }; finish_reason?: string | null }>
  usage?: { completion_tokens?: number } | null
  error?: unknown
}

export async function streamChat (req: StreamRequest): Promise<StreamOutcome> {
  const started = performance.now()
  const controller = new AbortController()
  let aborted = false
  const abort = (): void => {
    if (aborted) return
    aborted = true
    controller.abort()
  }
  const timer = req.abortAfterMs === undefined ? undefined : setTimeout(abort, req.abortAfterMs)
  const outcome: StreamOutcome = { status: null, retryAfter: null, latencyMs: 0, frames: 0, bytes: 0, done: false, aborted: false }
  try {
    const res = await fetch(`${req.base}/api/v1/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${req.key}`, 'content-type': 'application/json' },
      body: JSON.stringify({ ...req.body, stream: true }),
      signal: controller.signal,
    })
    outcome.status = res.status
    outcome.retryAfter = res.headers.get('retry-after')
    req.onHeaders?.(res.status)
    if (res.status !== 200) {
      const text = await res.text()
      try { outcome.errorBody = JSON.parse(text) } catch { outcome.errorBody = text }
      return outcome
    }
    const frames = new FrameChecker()
    const parser = createParser({
      onEvent: event => {
        outcome.frames++
        const text = frames.take(event.data)
        if (text && outcome.ttftMs === undefined) outcome.ttftMs = performance.now() - started
      },
    })
    if (req.abortAfterBytes === 0) abort()
    const decoder = new TextDecoder()
    for await (const bytes of res.body as AsyncIterable<Uint8Array>) {
      outcome.bytes += bytes.byteLength
      parser.feed(decoder.decode(bytes, { stream: true }))
      if (req.abortAfterBytes !== undefined && outcome.bytes >= req.abortAfterBytes) abort()
      if (aborted) break
    }
    Object.assign(outcome, frames.verdict())
  } catch (err) {
    if (!aborted) outcome.networkError = describe(err)
  } finally {
    clearTimeout(timer)
    outcome.aborted = aborted
    outcome.latencyMs = performance.now() - started
    if (aborted) outcome.malformed = undefined // a stream we cut is not expected to be whole
  }
  return outcome
}

/** Checks the frames of one stream in order. */
class FrameChecker {
  #id: string | undefined
  #count = 0
  #problem: string | undefined
  #finishReason: string | undefined
  #completionTokens: number | undefined
  #done = false
  #errorEvent: unknown

  /** Takes one frame's data; returns the text it carried. */
  take (data: string): string {
    const first = this.#count++ === 0
    if (this.#done) return this.#fail('a frame after [DONE]')
    if (data === '[DONE]') {
      this.#done = true
      if (this.#finishReason === undefined && this.#errorEvent === undefined) this.#fail('[DONE] before any finish_reason')
      return ''
    }
    let chunk: ChunkShape
    try {
      chunk = JSON.parse(data) as ChunkShape
    } catch {
      return this.#fail(`a frame that is not JSON: ${data.slice(0, 80)}`)
    }
    if (chunk.error !== undefined) {
      this.#errorEvent = chunk.error
      return this.#fail(`an error event: ${JSON.stringify(chunk.error).slice(0, 200)}`)
    }
    if (chunk.object !== 'chat.completion.chunk') return this.#fail(`object ${String(chunk.object)}`)
    this.#id ??= chunk.id
    if (chunk.id !== this.#id) return this.#fail('chunks of two ids')
    if (first && chunk.choices?.[0]?.delta?.role !== 'assistant') this.#fail('the first chunk has no assistant role')
    if (chunk.usage) this.#completionTokens = chunk.usage.completion_tokens
    const choice = chunk.choices?.[0]
    if (choice?.finish_reason) {
      if (this.#finishReason !== undefined) this.#fail('two finish_reasons')
      this.#finishReason = choice.finish_reason
    } else if (this.#finishReason !== undefined && chunk.choices?.length) {
      this.#fail('a delta after the finish_reason')
    }
    return choice?.delta?.content ?? ''
  }

  verdict (): Pick<StreamOutcome, 'done' | 'malformed' | 'finishReason' | 'completionTokens' | 'errorEvent'> {
    const malformed = this.#problem ?? (this.#done ? undefined : 'the stream ended without [DONE]')
    return { done: this.#done, malformed, finishReason: this.#finishReason, completionTokens: this.#completionTokens, errorEvent: this.#errorEvent }
  }

  #fail (problem: string): '' {
    this.#problem ??= problem
    return ''
  }
}

function describe (err: unknown): string {
  const e = err as { message?: string; cause?: { code?: string; message?: string } }
  return [e.message, e.cause?.code ?? e.cause?.message].filter(Boolean).join(': ')
}
