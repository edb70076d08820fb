// An AbortSignal that fires when the client goes away before the response is
// complete, so the backend stops generating at the next token.
//
// Fastify's request.signal is not usable for this: it listens for 'close' on
// the incoming request, which Node emits as soon as a POST body has been read,
// so it aborts every request with a body while the client is still waiting
// (checked with Fastify 5.12 on Node 24). The response's 'close' is the right
// event: it fires once the response is done or the socket is gone, and
// writableFinished tells the two apart.

import type { FastifyReply } from 'fastify'

export function clientGoneSignal (reply: FastifyReply): AbortSignal {
  const controller = new AbortController()
  const response = reply.raw
  if (response.destroyed) controller.abort()
  response.once('close', () => {
    if (!response.writableFinished) controller.abort()
  })
  return controller.signal
}
