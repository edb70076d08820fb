// Steady chat-completion traffic against a chatd process while a test injects
// a fault: `workers` loops, each sending one request after another (every
// other one streamed with include_usage), until stop(). Every outcome is kept
// with the phase the test had named when the request started and ended, so
// the test can count status codes per phase and match each complete 200 to its
// usage row by the completion id.

import { setTimeout as sleep } from 'node:timers/promises'
import { FAKE_MODEL } from './fake-upstream.ts'

export interface Outcome {
  /** The phase when the request was sent, and when its answer had been read. */
  phase: string
  endPhase: string
  startedAt: number
  ms: number
  /** HTTP status; 0 when no response came (connection refused or reset, client timeout). */
  status: number
  /** error.code of an error body (or of an error event inside a stream). */
  code?: string
  retryAfter?: string | null
  stream: boolean
  /** The completion id, for a complete 200 (a non-streamed body, or a stream that reached [DONE]). */
  id?: string
  /** A 200 whose reply arrived whole. */
  complete: boolean
  error?: string
}

export interface Load {
  /** Names the current phase; outcomes carry it. */
  phase: string
  readonly outcomes: Outcome[]
  /** Stops the workers and resolves once every request in flight has ended. */
  stop: () => Promise<Outcome[]>
}

export function driveLoad (opts: { url: string; key: string; workers?: number; pauseMs?: number; timeoutMs?: number; body?: Record<string, unknown> }): Load {
  const outcomes: Outcome[] = []
  let running = true
  const load: Load = {
    phase: 'start',
    outcomes,
    stop: async () => {
      running = false
      await Promise.all(loops)
      return outcomes
    },
  }
  let n = 0
  const one = async (): Promise<void> => {
    const stream = n++ % 2 === 1
    const phase = load.phase
    const startedAt = Date.now()
    const outcome: Outcome = { phase, endPhase: phase, startedAt, ms: 0, status: 0, stream, complete: false }
    try {
      const res = await fetch(`${opts.url}/api/v1/chat/completions`, {
        method: 'POST',
        headers: { authorization: `Bearer ${opts.key}`, 'content-type': 'application/json' },
        body: JSON.stringify({
          model: FAKE_MODEL,
          messages: [{ role: 'user', content: 'Tell me a story' }],
          max_tokens: 16,
          ...(stream ? { stream: true, stream_options: { include_usage: true } } : {}),
          ...opts.body,
        }),
        signal: AbortSignal.timeout(opts.timeoutMs ?? 30_000),
      })
      outcome.status = res.status
      outcome.retryAfter = res.headers.get('retry-after')
      const text = await res.text()
      if (res.status !== 200) {
        outcome.code = (JSON.parse(text) as { error?: { code?: string } }).error?.code
      } else if (!stream) {
        outcome.id = (JSON.parse(text) as { id: string }).id
        outcome.complete = true
      } else {
        const frames = text.split('\n\n').filter(f => f.startsWith('data: ')).map(f => f.slice(6))
        const error = frames.find(f => f.startsWith('{"error"'))
        if (error) outcome.code = (JSON.parse(error) as { error: { code: string } }).error.code
        outcome.complete = frames.at(-1) === '[DONE]'
        if (outcome.complete) outcome.id = (JSON.parse(frames[0]) as { id: string }).id
      }
    } catch (err) {
      outcome.error = (err as Error).cause instanceof Error ? ((err as Error).cause as Error).message : (err as Error).message
    }
    outcome.ms = Date.now() - startedAt
    outcome.endPhase = load.phase
    outcomes.push(outcome)
    if (outcome.status !== 200 && opts.pauseMs !== 0) await new Promise(resolve => setTimeout(resolve, opts.pauseMs ?? 50))
  }
  const loops = Array.from({ length: opts.workers ?? 4 }, async () => {
    // eslint-disable-next-line no-unmodified-loop-condition -- stop() clears it while the loops run
    while (running) await one()
  })
  return load
}

/** "200×12 503/database_unavailable×4" for one phase: what a failure message shows. */
export function tally (outcomes: Outcome[]): Record<string, number> {
  const counts: Record<string, number> = {}
  for (const o of outcomes) {
    const key = o.status === 0 ? `no-response(${o.error})` : o.code ? `${o.status}/${o.code}` : String(o.status)
    counts[key] = (counts[key] ?? 0) + 1
  }
  return counts
}

/**
 * The test's timeline: `phase(name, ms, during)` names the load's phase, runs
 * `during` (the fault, or a side request) inside it, and lasts at least `ms`;
 * `began` keeps when each phase started.
 */
export function phaseClock (load: Load): { began: Record<string, number>; phase: (name: string, ms: number, during?: () => Promise<void>) => Promise<void> } {
  const began: Record<string, number> = {}
  const phase = async (name: string, ms: number, during?: () => Promise<void>): Promise<void> => {
    load.phase = name
    const started = began[name] = Date.now()
    await during?.()
    await sleep(Math.max(0, ms - (Date.now() - started)))
  }
  return { began, phase }
}
