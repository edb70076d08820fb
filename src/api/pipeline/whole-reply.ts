// A reply that is not streamed, as every door reads it: the generation's events
// to the end (the usage row is written before the answer leaves), each delta
// handed to the door's builder, and the finish event returned for the door to
// answer in its own shape. How such a reply ends without an answer is the same
// at every door: a client that left has nobody to answer, and the shutdown's
// drain deadline is a 503 the client is still there to be told.

import type { FastifyRequest } from 'fastify'
import { ApiError } from '../../errors.ts'
import { drainDeadlineError } from '../drain-deadline.ts'
import type { VisibleFinish } from './completion-meta.ts'
import type { Delta, Finish, SearchEvent } from './events.ts'
import type { StartedCompletion } from './pipeline.ts'

export type { Delta, Finish }
/** A finish the client is answered with (a cancelled one never is). */
export type AnsweredFinish = Finish & { reason: VisibleFinish }

/**
 * Reads the whole reply, handing each delta to `onDelta` and each hosted search to `onSearch`.
 * Resolves with the finish event, or undefined when the client left (logged; nothing to send).
 * Throws the drain deadline's 503, and whatever the generation threw.
 */
export async function readWholeReply (
  request: FastifyRequest,
  started: Pick<StartedCompletion, 'events' | 'stop' | 'model'>,
  onDelta: (event: Delta) => void | Promise<void>,
  onSearch?: (event: SearchEvent) => void | Promise<void>
): Promise<AnsweredFinish | undefined> {
  let finish: Finish | undefined
  for await (const event of started.events) {
    if (event.type === 'delta') await onDelta(event)
    else if (event.type === 'search') await onSearch?.(event)
    else finish = event
  }
  if (finish === undefined) throw new ApiError('internal_error', 'The model stopped without finishing the reply.')
  if (finish.reason === 'cancelled') {
    if (started.stop.byShutdown()) throw drainDeadlineError()
    request.log.info({ model: started.model.id }, 'client disconnected; generation stopped')
    return undefined
  }
  return finish as AnsweredFinish
}
