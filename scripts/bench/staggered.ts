// Requests that arrive while others are answering, as users do: `streams`
// streams start `gapMs` apart, each a 128-token prompt and `gen` tokens. Each
// prompt after the first is fed while earlier streams decode, so this is where
// mixed batches (MIXED_BATCHES: a prompt chunk and the decode rows in one run)
// differ from separate prompt runs between decode steps. Reports generated
// tokens over the wall time from the first start to the last end, the
// newcomers' time to first token, and the inter-token p95 of all streams.
import type OpenAI from 'openai'
import { interTokenGaps, oneStream, percentile } from './http-round.ts'
import { median } from './rounds.ts'

export interface StaggeredResult {
  aggregate_tok_s: number
  /** Median time to first token of the streams that arrived while others decoded. */
  joiner_ttft_ms_p50: number
  itl_p95_ms: number
}

export async function measureStaggered (client: OpenAI, opts: { content: string; gen: number; streams: number; gapMs: number }): Promise<StaggeredResult> {
  const pending: Array<ReturnType<typeof oneStream>> = []
  for (let i = 0; i < opts.streams; i++) {
    if (i > 0) await new Promise(resolve => setTimeout(resolve, opts.gapMs))
    pending.push(oneStream(client, opts.content, opts.gen))
  }
  const streams = await Promise.all(pending)
  const wall = (Math.max(...streams.map(s => s.end)) - Math.min(...streams.map(s => s.start))) / 1000
  return {
    aggregate_tok_s: streams.reduce((sum, s) => sum + s.completionTokens, 0) / wall,
    joiner_ttft_ms_p50: median(streams.slice(1).map(s => s.first - s.start)),
    itl_p95_ms: percentile(streams.flatMap(interTokenGaps), 95),
  }
}
