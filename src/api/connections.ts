// How long a client may take to send its request, how many connections it may
// hold, and what a client that breaks HTTP itself is told. A chat completion
// may stream for minutes, so nothing here limits a response: only receiving.
//
// Node's http server does the timing (its docs, "server.headersTimeout" and
// "server.requestTimeout"): a request's timer starts at its first byte, the
// headers must be complete within headersTimeout and the whole request, body
// included, within requestTimeout; once the last byte of the body has arrived
// the request leaves the list being checked, so the response that follows
// (an SSE stream) is never cut by it. A connection that sends nothing counts
// as a request starting, so it is closed after headersTimeout too. Idle
// keep-alive connections close after keepAliveTimeout. Node checks the
// deadlines every connectionsCheckingInterval (30 s by default, which would
// let a 30 s deadline stretch to a minute), so the interval follows the
// shortest deadline here.
//
// A connection past MAX_CONNECTIONS or MAX_CONNECTIONS_PER_ADDRESS is not just
// dropped (clients and SDKs retry a reset blindly): it is answered 503
// server_overloaded with Retry-After, in the API's error shape, before the
// HTTP parser sees it, and closed. Closing a socket with unread data in it
// makes the kernel send a reset, which can overtake the answer, so what the
// client still sends is read and dropped for a moment: bounded in time, in
// bytes, and in how many refused connections may drain at once (past that a
// flood is closed unanswered, as Node itself does past server.maxConnections).
//
// Node reports an expired deadline, and a request that is not HTTP at all, as
// a 'clientError'; Fastify's own handler answers those with its own body, this
// one with the API's error shape (and only while no response has started on
// that connection: then the socket is just closed).

import { STATUS_CODES, type IncomingMessage, type ServerResponse } from 'node:http'
import type { Socket } from 'node:net'
import type { FastifyInstance, FastifyReply, FastifyRequest, FastifyServerOptions } from 'fastify'
import type { ConnectionLimits } from '../config.ts'
import { ApiError, type ErrorCode } from '../errors.ts'
import { clientKey } from './client-address.ts'
import { sendApiError } from './error-handler.ts'

/** How often Node checks the receive deadlines: a quarter of the shortest, at most every second. */
export function checkingIntervalMs (limits: ConnectionLimits): number {
  return Math.max(25, Math.min(1000, Math.floor(Math.min(limits.headersTimeoutMs, limits.requestTimeoutMs) / 4)))
}

/** The Fastify options that set the receive deadlines and the keep-alive timeout. */
export function timeoutOptions (limits: ConnectionLimits): Pick<FastifyServerOptions, 'requestTimeout' | 'keepAliveTimeout'> & { http: { headersTimeout: number; connectionsCheckingInterval: number } } {
  return {
    requestTimeout: limits.requestTimeoutMs,
    keepAliveTimeout: limits.keepAliveTimeoutMs,
    http: { headersTimeout: limits.headersTimeoutMs, connectionsCheckingInterval: checkingIntervalMs(limits) },
  }
}

/** What a client error from Node's HTTP parser or its deadlines is answered with. */
function clientErrorAnswer (code: string | undefined): ApiError {
  switch (code) {
    case 'ERR_HTTP_REQUEST_TIMEOUT':
      return new ApiError('request_timeout', 'The request did not arrive in time; the connection is closed (see HEADERS_TIMEOUT_MS and REQUEST_TIMEOUT_MS).')
    case 'HPE_HEADER_OVERFLOW':
      return new ApiError('headers_too_large', 'The request headers are too large.')
    case 'HPE_CHUNK_EXTENSIONS_OVERFLOW':
      return new ApiError('request_too_large', 'The request\'s chunk extensions are too large.')
    default:
      return new ApiError('malformed_request', 'The request is not valid HTTP/1.1.')
  }
}

/** An ApiError as a whole raw HTTP response that closes the connection. */
export function rawErrorResponse (error: ApiError): string {
  const body = JSON.stringify(error.toBody())
  const extra = Object.entries(error.headers).map(([name, value]) => `${name}: ${value}\r\n`).join('')
  return `HTTP/1.1 ${error.status} ${STATUS_CODES[error.status] ?? 'Error'}\r\n` +
    'Content-Type: application/json; charset=utf-8\r\n' +
    `Content-Length: ${Buffer.byteLength(body)}\r\n` +
    'X-Content-Type-Options: nosniff\r\n' +
    `${extra}Connection: close\r\n\r\n${body}`
}

/** How long and how much a refused connection is read before it is closed, and how many may be at once. */
export interface RefusalDrain {
  /** The longest a refused connection stays open (ms). */
  ms: number
  /** The most bytes read from it before it is closed. */
  bytes: number
  /** The most refused connections draining at once; more are closed unanswered. */
  sockets: number
}

export const DEFAULT_REFUSAL_DRAIN: RefusalDrain = { ms: 2000, bytes: 64 * 1024, sockets: 1024 }

/** The answer to a connection over a cap, written to the socket before any HTTP is parsed. */
function overCapAnswer (which: 'MAX_CONNECTIONS' | 'MAX_CONNECTIONS_PER_ADDRESS'): string {
  return rawErrorResponse(new ApiError('server_overloaded',
    `Too many open connections${which === 'MAX_CONNECTIONS_PER_ADDRESS' ? ' from your address' : ''} (${which}); retry shortly.`,
    { headers: { 'retry-after': '1' } }))
}

/** The client a connection is counted against (client-address.ts: an IPv6 client's /64). */
export function clientOf (socket: Pick<Socket, 'remoteAddress'>): string | undefined {
  return socket.remoteAddress === undefined ? undefined : clientKey(socket.remoteAddress)
}

/**
 * Connection caps and the clientError answer for one app's server. Made before
 * the app, because Fastify takes the clientError handler as an option; then
 * attached to the app's server.
 */
export class ConnectionGuard {
  readonly #limits: ConnectionLimits
  readonly #perAddress: boolean
  readonly #onRefused: (code: string) => void
  /** The response in progress on each connection, to tell whether an error may still be answered. */
  readonly #responses = new WeakMap<Socket, ServerResponse>()
  readonly #drain: RefusalDrain
  #log: FastifyInstance['log'] | undefined
  /** Connections admitted and still open, in all and per address. */
  #open = 0
  readonly #openFrom = new Map<string, number>()
  /** Refused connections still being answered and drained. */
  #draining = 0

  /**
   * `perAddress`: whether MAX_CONNECTIONS_PER_ADDRESS applies (not behind a
   * proxy, where every connection comes from the proxy's address).
   * `onRefused` is told the code of every connection refused or ended here.
   * `drain` bounds what a refused connection may still cost.
   */
  constructor (limits: ConnectionLimits, opts: { perAddress: boolean; onRefused?: (code: string) => void; drain?: Partial<RefusalDrain> }) {
    this.#limits = limits
    this.#perAddress = opts.perAddress
    this.#onRefused = opts.onRefused ?? (() => {})
    this.#drain = { ...DEFAULT_REFUSAL_DRAIN, ...opts.drain }
  }

  /** Refused connections being drained now. */
  get draining (): number {
    return this.#draining
  }

  /** Which cap a new connection from `address` (as clientOf gives it) is over, if any. */
  #overCap (address: string | undefined): 'MAX_CONNECTIONS' | 'MAX_CONNECTIONS_PER_ADDRESS' | undefined {
    const limits = this.#limits
    if (limits.maxConnections > 0 && this.#open >= limits.maxConnections) return 'MAX_CONNECTIONS'
    if (this.#perAddress && limits.maxConnectionsPerAddress > 0 && address !== undefined &&
      (this.#openFrom.get(address) ?? 0) >= limits.maxConnectionsPerAddress) return 'MAX_CONNECTIONS_PER_ADDRESS'
    return undefined
  }

  /** Counts an admitted connection from `address` (as clientOf gives it) until it closes. */
  #admit (socket: Socket, address: string | undefined): void {
    this.#open++
    if (address !== undefined) this.#openFrom.set(address, (this.#openFrom.get(address) ?? 0) + 1)
    socket.once('close', () => {
      this.#open--
      if (address === undefined) return
      const left = (this.#openFrom.get(address) ?? 1) - 1
      if (left <= 0) this.#openFrom.delete(address)
      else this.#openFrom.set(address, left)
    })
  }

  /** Answers a connection over a cap with 503, then reads and drops what it sends until it closes or a bound is reached. */
  #refuse (socket: Socket, which: 'MAX_CONNECTIONS' | 'MAX_CONNECTIONS_PER_ADDRESS'): void {
    this.#onRefused('too_many_connections')
    socket.on('error', () => {})
    if (this.#draining >= this.#drain.sockets) {
      socket.destroy()
      return
    }
    this.#draining++
    const timer = setTimeout(() => socket.destroy(), this.#drain.ms)
    socket.once('close', () => {
      clearTimeout(timer)
      this.#draining--
    })
    let read = 0
    socket.on('data', (chunk: Buffer) => {
      read += chunk.length
      if (read > this.#drain.bytes) socket.destroy()
    })
    // The client has sent all it will: close once the answer is flushed.
    socket.once('end', () => socket.destroySoon())
    socket.end(overCapAnswer(which))
  }

  /** Fastify's clientErrorHandler option. */
  readonly clientError = (err: NodeJS.ErrnoException, socket: Socket): void => {
    // A reset connection has nothing left to answer, nor has one whose socket
    // itself failed (EPIPE, ETIMEDOUT): only the parser's refusals and the
    // deadlines are answered.
    if (socket.destroyed) return
    if (err.code !== 'ERR_HTTP_REQUEST_TIMEOUT' && !err.code?.startsWith('HPE_')) {
      socket.destroy()
      return
    }
    const error = clientErrorAnswer(err.code)
    this.#onRefused(error.code)
    this.#log?.debug({ code: err.code }, `client error: ${error.code}`)
    // Once a response has started on this connection, an error response would corrupt it.
    const res = this.#responses.get(socket)
    if (socket.writable && !res?.headersSent) socket.end(rawErrorResponse(error))
    // Closed once the answer is flushed; nothing more is read from this client.
    socket.destroySoon()
  }

  attach (app: FastifyInstance): void {
    this.#log = app.log
    const server = app.server
    // The HTTP server's own connection handling (its parser) runs only for
    // connections under the caps; the others are answered here instead.
    const httpListeners = server.listeners('connection') as Array<(socket: Socket) => void>
    server.removeAllListeners('connection')
    server.on('connection', (socket: Socket) => {
      const address = clientOf(socket)
      const over = this.#overCap(address)
      if (over) {
        this.#refuse(socket, over)
        return
      }
      this.#admit(socket, address)
      for (const listener of httpListeners) listener.call(server, socket)
    })

    // A response sent before its request's body has arrived (a refusal in
    // onRequest: no key, too many refusals) closes the connection instead of
    // waiting on the rest of a body nobody will read.
    app.addHook('onSend', async (request, reply, payload) => {
      if (request.raw.complete === false) reply.header('connection', 'close')
      return payload
    })

    server.on('request', (req: IncomingMessage, res: ServerResponse) => {
      this.#responses.set(req.socket, res)
      res.once('close', () => { if (this.#responses.get(req.socket) === res) this.#responses.delete(req.socket) })
    })
  }
}

/** Fastify's frameworkErrors option: a URL its router cannot take, answered in the API's shape. */
export function frameworkErrors (error: Error & { code?: string }, request: FastifyRequest, reply: FastifyReply): void {
  const messages: Record<string, [ErrorCode, string]> = {
    FST_ERR_BAD_URL: ['malformed_request', 'The request URL is not valid (malformed percent-encoding).'],
    FST_ERR_MAX_PARAM_LENGTH: ['malformed_request', 'A path segment of the request URL is too long.'],
  }
  const known = Object.hasOwn(messages, error.code ?? '') ? messages[error.code!] : undefined
  const apiError = known ? new ApiError(known[0], known[1]) : new ApiError('internal_error', 'The server had an error while processing the request.')
  request.log.info({ code: apiError.code }, apiError.message)
  // Sent before the app's hooks are in place: the baseline header by hand. A
  // client that sends a URL nothing can route is not one whose next request on
  // this connection should be trusted to be framed right: it is closed, as
  // after every other malformed request.
  void sendApiError(reply.header('x-content-type-options', 'nosniff').header('connection', 'close'), apiError)
}
