// One round of the HTTP measurements on a running server: one stream at a time
// (the median of three requests: time to first token, prompt and decode
// tokens/s), then each concurrency level (aggregate tokens/s, time to first
// token, inter-token latency), all with the official openai client streaming.
import type OpenAI from 'openai'
import { BENCH_MODEL_ID } from './chatd-server.ts'
import { median } from './rounds.ts'

export interface LevelResult {
  concurrency: number
  aggregate_tok_s: number
  decode_tok_s_per_stream: number
  ttft_ms_p50: number
  itl_p50_ms: number
  itl_p95_ms: number
}

export interface HttpRound {
  prompt_tokens: number
  decode_tok_s_1: number
  prefill_tok_s: number
  ttft_ms: number
  levels: LevelResult[]
}

interface StreamTiming {
  start: number
  first: number
  end: number
  /** Arrival time of every chunk that carried text. */
  arrivals: number[]
  completionTokens: number
  promptTokens: number
}

export async function oneStream (client: OpenAI, content: string, gen: number): Promise<StreamTiming> {
  const start = performance.now()
  const stream = await client.chat.completions.create({
    model: BENCH_MODEL_ID,
    messages: [{ role: 'user', content }],
    max_tokens: gen,
    temperature: 0,
    stream: true,
    stream_options: { include_usage: true },
  })
  const arrivals: number[] = []
  let usage = { completion_tokens: 0, prompt_tokens: 0 }
  for await (const chunk of stream) {
    const delta = chunk.choices[0]?.delta
    if (delta && ((delta.content ?? '') !== '' || ((delta as { reasoning_content?: string }).reasoning_content ?? '') !== '')) arrivals.push(performance.now())
    if (chunk.usage) usage = chunk.usage
  }
  const end = performance.now()
  return { start, first: arrivals[0] ?? end, end, arrivals, completionTokens: usage.completion_tokens, promptTokens: usage.prompt_tokens }
}

export function percentile (xs: number[], p: number): number {
  if (xs.length === 0) return NaN
  const sorted = [...xs].sort((a, b) => a - b)
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))]
}

/** Gaps between text chunks (a chunk can carry several tokens: the detokenizer holds incomplete characters). */
export function interTokenGaps (s: StreamTiming): number[] {
  const gaps: number[] = []
  for (let i = 1; i < s.arrivals.length; i++) gaps.push(s.arrivals[i] - s.arrivals[i - 1])
  return gaps
}

const decodeRate = (s: StreamTiming): number => (s.completionTokens - 1) / ((s.end - s.first) / 1000)

export async function measureHttpRound (client: OpenAI, opts: { content: string; gen: number; levels: number[]; log?: (line: string) => void }): Promise<HttpRound> {
  const singles = [await oneStream(client, opts.content, opts.gen), await oneStream(client, opts.content, opts.gen), await oneStream(client, opts.content, opts.gen)]
  const ttft = median(singles.map(s => s.first - s.start))
  const levels: LevelResult[] = []
  for (const n of opts.levels) {
    opts.log?.(`  ${n} concurrent stream(s) ...`)
    const streams = await Promise.all(Array.from({ length: n }, () => oneStream(client, opts.content, opts.gen)))
    const wall = (Math.max(...streams.map(s => s.end)) - Math.min(...streams.map(s => s.start))) / 1000
    const gaps = streams.flatMap(interTokenGaps)
    levels.push({
      concurrency: n,
      aggregate_tok_s: streams.reduce((sum, s) => sum + s.completionTokens, 0) / wall,
      decode_tok_s_per_stream: median(streams.map(decodeRate)),
      ttft_ms_p50: median(streams.map(s => s.first - s.start)),
      itl_p50_ms: percentile(gaps, 50),
      itl_p95_ms: percentile(gaps, 95),
    })
  }
  return {
    prompt_tokens: singles[0].promptTokens,
    decode_tok_s_1: median(singles.map(decodeRate)),
    prefill_tok_s: singles[0].promptTokens / (ttft / 1000),
    ttft_ms: ttft,
    levels,
  }
}
