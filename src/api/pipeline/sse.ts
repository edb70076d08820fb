// A Server-Sent Events body. Handed to reply.send() as a stream, so Fastify
// still runs its response hooks (logging, metrics) and destroys it when the
// client goes away. Writes a `: keep-alive` comment whenever nothing else has
// been written for `keepAliveMs`, so proxies and clients do not time out while
// a request waits in the queue or thinks. streamGeneration is how every door
// (chat completions, Responses, Messages) streams a generation through one.

import { PassThrough } from 'node:stream'
import type { FastifyReply, FastifyRequest } from 'fastify'
import { ApiError } from '../../errors.ts'
import { drainDeadlineError } from '../drain-deadline.ts'
import type { CompletionEvent, Delta, SearchEvent } from './events.ts'
import type { StopSignal } from './stop-signal.ts'
import type { AnsweredFinish } from './whole-reply.ts'

export const SSE_HEADERS = {
  'content-type': 'text/event-stream; charset=utf-8',
  'cache-control': 'no-cache, no-transform',
  // nginx buffers proxied responses unless told not to; a buffered stream is no stream.
  'x-accel-buffering': 'no',
}

/**
 * Waits up to one keep-alive interval for a stream's first event, so that a refusal before any
 * output (context too long, queue full) still gets its own HTTP status and body: `ready` (the
 * first event is in; a refusal is thrown from here) or `slow` (start the stream anyway, with
 * keep-alives; a later refusal becomes the stream's error event).
 */
async function awaitFirstEvent (first: Promise<unknown>, keepAliveMs: number): Promise<'ready' | 'slow'> {
  let timer: NodeJS.Timeout | undefined
  const waited = await Promise.race([
    first.then(() => 'ready' as const),
    new Promise<'slow'>(resolve => { timer = setTimeout(resolve, keepAliveMs, 'slow') }),
  ]).finally(() => clearTimeout(timer))
  return waited
}

export class SseBody {
  readonly stream = new PassThrough()
  readonly #keepAlive: NodeJS.Timeout

  /** `keepAlive`: the frame written when nothing else was for `keepAliveMs` (an SSE comment unless a format has its own, as Anthropic's `ping`). */
  constructor (keepAliveMs: number, keepAlive = ': keep-alive\n\n') {
    this.#keepAlive = setInterval(() => this.#write(keepAlive), keepAliveMs)
    this.#keepAlive.unref()
    this.stream.once('close', () => clearInterval(this.#keepAlive))
  }

  get closed (): boolean {
    return this.stream.destroyed || this.stream.writableEnded
  }

  /** Writes one `data:` frame; resolves once the stream can take more (backpressure). */
  async data (value: unknown): Promise<void> {
    await this.#write(`data: ${typeof value === 'string' ? value : JSON.stringify(value)}\n\n`)
  }

  /** Writes one named event (`event:` then `data:`), as the Responses and Messages streams frame theirs. */
  async event (name: string, value: unknown): Promise<void> {
    await this.#write(`event: ${name}\ndata: ${JSON.stringify(value)}\n\n`)
  }

  comment (text: string): Promise<void> {
    return this.#write(`: ${text}\n\n`)
  }

  end (): void {
    clearInterval(this.#keepAlive)
    if (!this.closed) this.stream.end()
  }

  async #write (text: string): Promise<void> {
    if (this.closed) return
    this.#keepAlive.refresh()
    if (!this.stream.write(text)) {
      await new Promise<void>(resolve => {
        const done = (): void => {
          this.stream.off('drain', done)
          this.stream.off('close', done)
          resolve()
        }
        this.stream.on('drain', done)
        this.stream.on('close', done)
      })
    }
  }
}

/** What a door writes for each part of a generation's stream (streamGeneration). */
export interface StreamWriters {
  /** The stream's opening frames, once the status line is out; `slow`: the first event is still awaited. */
  open (slow: boolean): Promise<void>
  delta (event: Delta): Promise<void>
  /** A hosted search the reply runs (a door that offers none never gets one). */
  search? (event: SearchEvent): Promise<void>
  /** The generation finished (not cancelled): the closing frames. */
  finish (event: AnsweredFinish): Promise<void>
  /** A failure after the status line: the stream's error frame (log it, count it, write it). */
  fail (err: unknown): Promise<void>
}

/**
 * Streams one generation as SSE, the same way for every door: the status line waits for the
 * first event (awaitFirstEvent: a refusal before it is thrown from here, with its own status);
 * then the door's frames for each event; a generation cancelled by the drain deadline ends with
 * the door's error frame, one cancelled by the client's leaving just ends; however it ends, the
 * generation is closed (releasing its permit and gauges) and so is the stream.
 */
export async function streamGeneration (
  request: FastifyRequest,
  reply: FastifyReply,
  events: AsyncIterable<CompletionEvent>,
  opts: { keepAliveMs: number; keepAlive?: string; stop: StopSignal },
  writers: (sse: SseBody) => StreamWriters
): Promise<FastifyReply> {
  const iterator = events[Symbol.asyncIterator]()
  const firstEvent = iterator.next()
  const waited = await awaitFirstEvent(firstEvent, opts.keepAliveMs)
  const sse = new SseBody(opts.keepAliveMs, opts.keepAlive)
  const write = writers(sse)
  reply.code(200).headers(SSE_HEADERS).send(sse.stream)

  void (async () => {
    try {
      await write.open(waited === 'slow')
      let next = await firstEvent
      while (!next.done) {
        const event = next.value
        if (event.type === 'delta') {
          await write.delta(event)
        } else if (event.type === 'search') {
          await write.search?.(event)
        } else {
          if (event.reason === 'cancelled') {
            if (opts.stop.byShutdown()) throw drainDeadlineError() // ends the stream with an error frame
            break // the client has gone
          }
          await write.finish({ ...event, reason: event.reason })
          break
        }
        next = await iterator.next()
      }
    } catch (err) {
      await write.fail(err)
    } finally {
      // Closes the backend's generator (releasing the gauge and the permit) if we stopped early.
      await Promise.resolve(iterator.return?.()).catch(err => request.log.error({ err }, 'closing the generation failed'))
      sse.end()
    }
  })()
  return reply
}

/** A failure after the status line, as the ApiError its error frame carries; one not expected is logged with its stack. */
export function failedWhileStreaming (request: FastifyRequest, err: unknown, message: string): ApiError {
  if (err instanceof ApiError) return err
  request.log.error({ err }, 'stream failed')
  return new ApiError('internal_error', message)
}
