// After a reply, the backend learns how the conversation's next request will
// start, so a local engine can compute that while the user reads the answer and
// types the next message (src/engine/onnx/cache/next-turn.ts says why it pays).
import type { Backend, GenerateEvent, GenerateRequest } from '../../engine/backend.ts'
import { nextTurnStart } from '../../prompt/shape.ts'

/**
 * Passes `events` through; once the reply finishes (not cancelled), hands the backend the shaped
 * conversation as the next turn will start: the request's messages, then the reply's content as
 * the client received it, shaped as an earlier assistant turn. It is computed for the request's
 * cache scope: only that account (and cache_salt) reuses it.
 */
export async function * withNextTurn (events: AsyncIterable<GenerateEvent>, backend: Backend, request: GenerateRequest): AsyncIterable<GenerateEvent> {
  let content = ''
  let calls = false
  for await (const event of events) {
    if (event.type === 'delta') {
      content += event.content ?? ''
      if (event.toolCalls) calls = true
    // A reply with tool calls comes back as a calls turn and its results: no plain next turn to compute.
    } else if (event.reason !== 'cancelled' && !calls) backend.prepareNextTurn?.(nextTurnStart(request.messages, content), request.cacheScope)
    yield event
  }
}
