// Counts one generation into the metrics as its events pass through: the
// active-requests gauge for its whole life, the queue-length gauge until its
// first event, time to first token, tokens, and how it finished. The gauge (and `onEnd`, the admission permit) is released in
// `finally`, so a request that ends by error, by disconnect or by the consumer
// stopping early never stays counted.

import type { GenerateEvent } from '../../engine/backend.ts'
import type { Metrics } from '../metrics/metrics.ts'

export async function * observeGeneration (events: AsyncIterable<GenerateEvent>, metrics: Metrics, model: string, startedAt: number, onEnd?: () => void): AsyncIterable<GenerateEvent> {
  const labels = { model }
  metrics.activeRequests.inc(labels)
  metrics.queueLength.inc(labels)
  let waiting = true
  let firstText = true
  try {
    for await (const event of events) {
      if (waiting) {
        waiting = false
        metrics.queueLength.dec(labels)
      }
      if (event.type === 'delta') {
        if (firstText && (event.content || event.reasoning || event.toolCalls)) {
          firstText = false
          metrics.timeToFirstToken.observe(labels, (performance.now() - startedAt) / 1000)
        }
      } else {
        metrics.generatedTokens.inc(labels, event.usage.completion_tokens)
        metrics.promptTokens.inc(labels, event.usage.prompt_tokens)
        metrics.cachedPromptTokens.inc(labels, event.usage.prompt_tokens_details?.cached_tokens ?? 0)
        metrics.completions.inc({ model, finish_reason: event.reason })
      }
      yield event
    }
  } finally {
    if (waiting) metrics.queueLength.dec(labels)
    metrics.activeRequests.dec(labels)
    onEnd?.()
  }
}
