// A Server-Sent Events body. Handed to reply.send() as a stream, so Fastify
// still runs its response hooks (logging, metrics) and destroys it when the
// client goes away. Writes a `: keep-alive` comment whenever nothing else has
// been written for `keepAliveMs`, so proxies and clients do not time out while
// a request waits in the queue or thinks.

import { PassThrough } from 'node:stream'

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
 * keep-alives; a later refusal becomes the stream's error event). Every door's stream starts so.
 */
export async function awaitFirstEvent (first: Promise<unknown>, keepAliveMs: number): Promise<'ready' | 'slow'> {
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
