// Memory of this process while a run goes on: resident set and V8 heap, taken
// before, at their peak (sampled every 100 ms) and after. In `npm run load` the
// server and its clients share the process, so the figures include both; the
// clients hold little (one response at a time per connection).

import { setFlagsFromString } from 'node:v8'
import { runInNewContext } from 'node:vm'

export interface MemoryFigures {
  rssMb: number
  heapUsedMb: number
}

const mb = (bytes: number): number => Math.round(bytes / 2 ** 20)

export function memoryNow (): MemoryFigures {
  const usage = process.memoryUsage()
  return { rssMb: mb(usage.rss), heapUsedMb: mb(usage.heapUsed) }
}

export class PeakMemory {
  #peak: MemoryFigures = memoryNow()
  readonly #timer: NodeJS.Timeout

  constructor (intervalMs = 100) {
    this.#timer = setInterval(() => this.sample(), intervalMs)
    this.#timer.unref()
  }

  sample (): void {
    const now = memoryNow()
    this.#peak = { rssMb: Math.max(this.#peak.rssMb, now.rssMb), heapUsedMb: Math.max(this.#peak.heapUsedMb, now.heapUsedMb) }
  }

  stop (): MemoryFigures {
    clearInterval(this.#timer)
    this.sample()
    return this.#peak
  }
}

/** V8's collector: global gc under --expose-gc, else turned on now (npm scripts cannot pass node flags). */
function collector (): () => void {
  const exposed = (globalThis as { gc?: () => void }).gc
  if (exposed) return exposed
  setFlagsFromString('--expose-gc')
  return runInNewContext('gc') as () => void
}

/**
 * Memory once the run's garbage is gone: collects and waits for the RSS to
 * stop falling, up to `withinMs`. What stays above the start is mostly V8's
 * young generation, which grows under a high allocation rate and keeps its
 * size, and pages the allocator keeps; the heap in use comes back down.
 */
export async function settledMemory (withinMs = 5000): Promise<MemoryFigures> {
  const gc = collector()
  const deadline = performance.now() + withinMs
  let last = memoryNow()
  for (;;) {
    gc()
    await new Promise(resolve => setTimeout(resolve, 250))
    const now = memoryNow()
    if (now.rssMb >= last.rssMb || performance.now() > deadline) return now
    last = now
  }
}
