// When a generation must stop: its client went away (client-gone.ts), or the
// server's drain deadline passed (drain-deadline.ts). The backend gets one
// signal for both; the route asks which it was, since the two end differently:
// nobody is left to answer, or the answer says the server shut down.

import type { FastifyReply } from 'fastify'
import { clientGoneSignal } from '../client-gone.ts'

export interface StopSignal {
  signal: AbortSignal
  /** The deadline stopped it while the client was still there. */
  byShutdown (): boolean
}

export function stopSignal (reply: FastifyReply, drainDeadline: AbortSignal): StopSignal {
  const clientGone = clientGoneSignal(reply)
  const controller = new AbortController()
  const stop = (): void => controller.abort()
  if (clientGone.aborted || drainDeadline.aborted) stop()
  clientGone.addEventListener('abort', stop, { once: true })
  // The deadline's signal outlives every request: each listener leaves with its response.
  if (!reply.raw.closed) {
    drainDeadline.addEventListener('abort', stop, { once: true })
    reply.raw.once('close', () => drainDeadline.removeEventListener('abort', stop))
  }
  return { signal: controller.signal, byShutdown: () => drainDeadline.aborted && !clientGone.aborted }
}
