// Per-response timings, for a client that asks with `X-Chatd-Timings: 1`:
// where the time of its own request went (the queue, the prompt, the
// generation), as llama-server's `timings` and vLLM's per-request metrics
// report it. Every door's non-streamed reply carries them as a standard
// `Server-Timing` header; a chat completion also carries a `timings` object,
// in its body or, streamed, in its last chunk.

import type { FastifyRequest } from 'fastify'
import type { GenerateTimings, Usage } from '../../engine/backend.ts'
import { ApiError } from '../../errors.ts'

export const TIMINGS_HEADER = 'x-chatd-timings'

/** Whether the request asked for its timings; a value other than 1, true, 0 or false is a 400. */
export function timingsRequested (request: FastifyRequest): boolean {
  const raw = request.headers[TIMINGS_HEADER]
  if (raw === undefined) return false
  const value = (Array.isArray(raw) ? raw.join(',') : raw).trim().toLowerCase()
  if (value === '1' || value === 'true') return true
  if (value === '0' || value === 'false') return false
  throw new ApiError('invalid_parameter', `The ${TIMINGS_HEADER} header must be 1 (or true) to ask for the response's timings, or 0 (or false).`, { param: TIMINGS_HEADER })
}

/** The `timings` object (milliseconds, tokens, tokens per second); fields a backend cannot know are absent. */
export interface ResponseTimings {
  /** From the request's checks starting to its first output, and to its end. */
  ttft_ms: number
  total_ms: number
  /** Local models: waiting in the engine's queue. */
  queue_ms?: number
  /** The prompt: its tokens, those found in the prefix cache, and (local models) the time to compute the rest. */
  prompt_n: number
  cache_n: number
  prompt_ms?: number
  prompt_per_second?: number
  /** The generated tokens, and the time from the first to the last. */
  predicted_n: number
  predicted_ms: number
  predicted_per_second?: number
}

const round = (ms: number): number => Math.round(ms * 1000) / 1000

/** What happened to one request, on the wall clock (backend.ts wallClock). */
export interface Timeline {
  arrivedAt: number
  firstOutputAt?: number
  lastOutputAt?: number
  endedAt: number
  /** The backend's own times for its (last) call. */
  backend?: GenerateTimings
  usage: Usage
}

export function responseTimings (t: Timeline): ResponseTimings {
  const engine = t.backend
  const first = engine?.firstTokenAt ?? t.firstOutputAt
  const last = engine?.lastTokenAt ?? t.lastOutputAt
  const predictedMs = first !== undefined && last !== undefined ? last - first : 0
  const predicted = t.usage.completion_tokens
  const cached = t.usage.prompt_tokens_details?.cached_tokens ?? 0
  const queued = engine?.queuedAt !== undefined && engine.scheduledAt !== undefined ? engine.scheduledAt - engine.queuedAt : undefined
  const promptMs = engine?.scheduledAt !== undefined && engine.firstTokenAt !== undefined ? engine.firstTokenAt - engine.scheduledAt : undefined
  // In this order in the JSON: the times, then the prompt, then the generation.
  return {
    ttft_ms: round((t.firstOutputAt ?? t.endedAt) - t.arrivedAt),
    total_ms: round(t.endedAt - t.arrivedAt),
    ...(queued !== undefined ? { queue_ms: round(queued) } : {}),
    prompt_n: t.usage.prompt_tokens,
    cache_n: cached,
    ...(promptMs !== undefined ? { prompt_ms: round(promptMs) } : {}),
    ...(promptMs !== undefined && promptMs > 0 ? { prompt_per_second: round((t.usage.prompt_tokens - cached) / promptMs * 1000) } : {}),
    predicted_n: predicted,
    predicted_ms: round(predictedMs),
    // Tokens after the first, over the time between the first and the last.
    ...(predictedMs > 0 && predicted > 1 ? { predicted_per_second: round((predicted - 1) / predictedMs * 1000) } : {}),
  }
}

/** The same as a Server-Timing header value (durations in ms). */
export function serverTiming (timings: ResponseTimings): string {
  const parts = [
    timings.queue_ms !== undefined ? `queue;dur=${timings.queue_ms}` : undefined,
    timings.prompt_ms !== undefined ? `prompt;dur=${timings.prompt_ms}` : undefined,
    `ttft;dur=${timings.ttft_ms}`,
    `decode;dur=${timings.predicted_ms}`,
    `total;dur=${timings.total_ms}`,
  ]
  return parts.filter(p => p !== undefined).join(', ')
}
