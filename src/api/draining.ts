// Draining on close, for buildApp. Fastify stops routing and Node closes the
// idle connections, but a keep-alive connection that was busy (a stream) stays
// open after its response until keepAliveTimeout (72 s), holding close()
// back; so while closing, every finished response also closes its connection.
// Requests that still arrive on an open connection get the API's own 503
// body (instead of Fastify's built-in one) and Connection: close.
//
// Node's server.close() closes only the connections it counts as idle, and a
// connection that is open but has not sent a request yet is not one of them
// (its parser counts it as a request starting, for headersTimeout). undici,
// the openai client's default agent, opens such a connection when a stream
// it abandoned closes its socket; close() then waited for headersTimeout to
// reap it (about 70 s). So chatd counts the requests on each connection and,
// when closing starts, ends every connection with none in progress.
//
// Draining lasts at most SHUTDOWN_GRACE_MS (none set: as long as it takes);
// then the generations still running are stopped and their replies ended
// with an error (drain-deadline.ts), so close() returns in bounded time.

import type { IncomingMessage, ServerResponse } from 'node:http'
import type { Socket } from 'node:net'
import type { FastifyInstance } from 'fastify'
import { ApiError } from '../errors.ts'
import { DrainDeadline } from './drain-deadline.ts'

/** Installs the hooks; the returned signal aborts when the grace period has run out. */
export function installDraining (app: FastifyInstance, opts: { shutdownGraceMs?: number }): AbortSignal {
  let closing = false
  const drainDeadline = new DrainDeadline()
  const inProgress = new Map<Socket, number>()
  app.server.on('connection', (socket: Socket) => {
    inProgress.set(socket, 0)
    socket.once('close', () => inProgress.delete(socket))
  })
  app.server.on('request', (req: IncomingMessage, res: ServerResponse) => {
    const socket = req.socket
    inProgress.set(socket, (inProgress.get(socket) ?? 0) + 1)
    res.once('close', () => { if (inProgress.has(socket)) inProgress.set(socket, inProgress.get(socket)! - 1) })
  })
  app.addHook('preClose', async () => {
    closing = true
    if (opts.shutdownGraceMs !== undefined) drainDeadline.start(opts.shutdownGraceMs)
    for (const [socket, requests] of inProgress) if (requests === 0) socket.destroy()
  })
  app.addHook('onClose', async () => { drainDeadline.cancel() })
  app.addHook('onRequest', async () => {
    if (closing) throw new ApiError('server_overloaded', 'The server is shutting down; retry shortly.', { headers: { 'retry-after': '1' } })
  })
  app.addHook('onResponse', async request => {
    if (closing) request.raw.socket?.end()
  })
  return drainDeadline.signal
}
