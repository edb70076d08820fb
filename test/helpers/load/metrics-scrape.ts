// Reads chatd's /metrics as a monitoring system would, and waits for the
// gauges that say work is in progress to come back to zero after a run:
// requests being answered, requests waiting for the model, and sequences the
// engine still holds. A gauge that stays up after the clients have gone is a
// leaked permit or a generation nobody stops.

/** The gauges that are all zero when the server is idle. */
export const BUSY_GAUGES = ['chatd_active_requests', 'chatd_queue_length', 'chatd_engine_sequences'] as const

/** Sum of every sample of `name` (all label sets) in a Prometheus text exposition; undefined when absent. */
export function metricTotal (text: string, name: string): number | undefined {
  let total: number | undefined
  for (const line of text.split('\n')) {
    if (line.startsWith('#')) continue
    const match = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)/.exec(line)
    if (match?.[1] !== name) continue
    total = (total ?? 0) + Number(match[3])
  }
  return total
}

/** Samples of `name` with their labels, e.g. chatd_http_requests_total by status. */
export function metricSamples (text: string, name: string): Array<{ labels: Record<string, string>; value: number }> {
  const samples: Array<{ labels: Record<string, string>; value: number }> = []
  for (const line of text.split('\n')) {
    const match = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{([^}]*)\})?\s+(\S+)/.exec(line)
    if (match?.[1] !== name) continue
    const labels: Record<string, string> = {}
    for (const pair of (match[2] ?? '').matchAll(/(\w+)="((?:[^"\\]|\\.)*)"/g)) labels[pair[1]] = pair[2]
    samples.push({ labels, value: Number(match[3]) })
  }
  return samples
}

export async function scrape (base: string): Promise<string> {
  const res = await fetch(`${base}/metrics`)
  if (!res.ok) throw new Error(`GET /metrics answered ${res.status}`)
  return res.text()
}

export interface IdleResult {
  idle: boolean
  /** The busy gauges at the last scrape (a missing gauge reads 0). */
  gauges: Record<string, number>
  waitedMs: number
  /** The last scrape's text, for further figures. */
  text: string
}

/** Polls /metrics until every busy gauge reads 0, or the deadline passes. */
export async function waitForIdle (base: string, deadlineMs: number): Promise<IdleResult> {
  const started = performance.now()
  for (;;) {
    const text = await scrape(base)
    const gauges = Object.fromEntries(BUSY_GAUGES.map(name => [name, metricTotal(text, name) ?? 0]))
    const idle = Object.values(gauges).every(v => v === 0)
    const waitedMs = performance.now() - started
    if (idle || waitedMs >= deadlineMs) return { idle, gauges, waitedMs, text }
    await new Promise(resolve => setTimeout(resolve, 50))
  }
}
