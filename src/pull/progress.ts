// Showing a pull's progress: bars on a terminal (cli-progress), plain lines
// elsewhere (CI, docker logs, the server's log), and a running summary the
// server reports on /readyz and in the model's 503 message.

import { MultiBar, Presets, type SingleBar } from 'cli-progress'
import type { DownloadProgress } from '../engine/backend.ts'
import type { PullEvent } from './pull.ts'

export function formatBytes (n: number): string {
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB']
  let i = 0
  while (n >= 1024 && i < units.length - 1) {
    n /= 1024
    i++
  }
  return i === 0 ? `${n} B` : `${n.toFixed(1)} ${units[i]}`
}

export function formatDuration (seconds: number): string {
  if (!Number.isFinite(seconds)) return '--:--'
  const s = Math.max(0, Math.round(seconds))
  const h = Math.floor(s / 3600)
  const mm = String(Math.floor((s % 3600) / 60)).padStart(2, '0')
  const ss = String(s % 60).padStart(2, '0')
  return h > 0 ? `${h}:${mm}:${ss}` : `${mm}:${ss}`
}

/** Bytes per second over the last few seconds, so a stall shows as a falling speed. */
export class RateMeter {
  readonly #samples: Array<{ t: number; bytes: number }> = []
  readonly #windowMs: number

  constructor (windowMs = 5000) {
    this.#windowMs = windowMs
  }

  add (bytes: number, now = performance.now()): void {
    this.#samples.push({ t: now, bytes })
    while (this.#samples.length > 2 && now - this.#samples[1].t > this.#windowMs) this.#samples.shift()
  }

  reset (): void {
    this.#samples.length = 0
  }

  /** Bytes per second; 0 until two samples exist. */
  get rate (): number {
    const first = this.#samples[0]
    const last = this.#samples.at(-1)
    if (!first || !last || last.t <= first.t) return 0
    return (last.bytes - first.bytes) / ((last.t - first.t) / 1000)
  }
}

/**
 * How long the rest of a conversion will take on this machine: its pace so far
 * (seconds per tensor since the start) times the tensors left. Undefined until
 * a tensor is done.
 */
export function conversionSecondsLeft (tensors: number, total: number, elapsedSeconds: number): number | undefined {
  if (tensors <= 0 || total <= 0 || tensors > total) return undefined
  return (elapsedSeconds / tensors) * (total - tensors)
}

/** What a pull has done so far, for a status line or a JSON body. */
export type PullStatus = DownloadProgress

/** Folds pull events into a PullStatus. */
export class PullTracker {
  #status: PullStatus = { downloadedBytes: 0, totalBytes: 0, percent: 0, bytesPerSecond: 0 }
  #doneBefore = 0
  readonly #meter = new RateMeter()
  readonly #now: () => number

  /** `now`: milliseconds (performance.now by default; tests pass a clock). */
  constructor (opts: { now?: () => number } = {}) {
    this.#now = opts.now ?? (() => performance.now())
  }

  get status (): PullStatus {
    return { ...this.#status }
  }

  /** "43.0% (512.0 MiB of 1.2 GiB, 35.1 MiB/s, about 00:20 left)" */
  describe (): string {
    const conversion = this.conversion
    if (conversion) return conversion
    const s = this.#status
    if (s.totalBytes === 0) return 'listing the files to download'
    const speed = s.bytesPerSecond > 0 ? `, ${formatBytes(s.bytesPerSecond)}/s, about ${formatDuration(s.etaSeconds ?? Infinity)} left` : ''
    return `${s.percent.toFixed(1)}% (${formatBytes(s.downloadedBytes)} of ${formatBytes(s.totalBytes)}${speed})`
  }

  onEvent (event: PullEvent): void {
    const s = this.#status
    switch (event.type) {
      case 'plan':
        s.totalBytes = event.totalBytes
        this.#doneBefore = event.present.reduce((sum, f) => sum + f.size, 0)
        this.#set(this.#doneBefore)
        break
      case 'file-start':
        s.file = event.file.path
        this.#set(this.#doneBefore + event.resumeFrom)
        break
      case 'file-progress':
        this.#set(this.#doneBefore + event.bytes)
        break
      case 'file-done':
        this.#doneBefore += event.file.size
        this.#set(this.#doneBefore)
        break
      case 'done':
        s.file = undefined
        this.#set(s.totalBytes)
        break
      case 'convert-start':
        this.#converting = { tensors: 0, total: 0, startedAt: this.#now() }
        break
      case 'convert-progress':
        this.#converting = { tensors: event.tensors, total: event.total, startedAt: this.#converting?.startedAt ?? this.#now() }
        break
      case 'convert-done':
        this.#converting = undefined
        this.#verifying = true
        break
      case 'verified':
        this.#verifying = false
        break
    }
  }

  #converting?: { tensors: number; total: number; startedAt: number }
  #verifying = false

  /** The conversion's state, once the download is done (source "checkpoint"). */
  get conversion (): string | undefined {
    if (this.#converting) {
      const { tensors, total, startedAt } = this.#converting
      const left = conversionSecondsLeft(tensors, total, (this.#now() - startedAt) / 1000)
      return total > 0
        ? `converting the checkpoint: ${Math.floor((tensors / total) * 100)}% of ${total} tensors${left === undefined ? '' : `, about ${formatDuration(left)} left at this machine's pace`}`
        : 'converting the checkpoint'
    }
    return this.#verifying ? 'checking that the converted model runs' : undefined
  }

  #set (downloaded: number): void {
    const s = this.#status
    s.downloadedBytes = downloaded
    s.percent = s.totalBytes > 0 ? Math.floor((downloaded / s.totalBytes) * 1000) / 10 : 0
    this.#meter.add(downloaded)
    s.bytesPerSecond = Math.round(this.#meter.rate)
    s.etaSeconds = s.bytesPerSecond > 0 ? Math.round((s.totalBytes - downloaded) / s.bytesPerSecond) : undefined
  }
}

/** Plain progress lines: each file's start and end, and a status line at most every `intervalMs`. */
export function lineReporter (write: (line: string) => void, intervalMs = 5000, now: () => number = () => performance.now()): (event: PullEvent) => void {
  const tracker = new PullTracker({ now })
  let lastLine = 0
  let convertStarted = 0
  return event => {
    tracker.onEvent(event)
    switch (event.type) {
      case 'plan': {
        const todo = event.files.length - event.present.length
        write(`${event.files.length} files, ${formatBytes(event.totalBytes)} in all; ${todo === 0 ? 'all already complete' : `${todo} to download`}`)
        break
      }
      case 'file-start':
        write(`downloading ${event.file.path} (${formatBytes(event.file.size)}${event.resumeFrom > 0 ? `, resuming at ${formatBytes(event.resumeFrom)}` : ''})`)
        lastLine = now()
        break
      case 'file-progress':
        if (now() - lastLine >= intervalMs) {
          lastLine = now()
          write(`${event.file.path}: ${tracker.describe()}`)
        }
        break
      case 'file-done':
        write(`${event.file.path}: done in ${event.seconds.toFixed(1)} s`)
        break
      case 'retry':
        write(`${event.error.message}; retrying in ${(event.delayMs / 1000).toFixed(0)} s`)
        break
      case 'done':
        write(event.files === 0 ? 'nothing to download' : `complete: ${event.files} files, ${formatBytes(event.totalBytes)}, verified`)
        break
      case 'convert-start':
        write(`converting the checkpoint to ${event.weights} with chatd's converter (several minutes for a 1.5B model; the time left is estimated as it goes)`)
        lastLine = now()
        convertStarted = lastLine
        break
      case 'convert-progress':
        if (now() - lastLine >= intervalMs || event.tensors === event.total) {
          lastLine = now()
          const left = event.tensors === event.total ? undefined : conversionSecondsLeft(event.tensors, event.total, (lastLine - convertStarted) / 1000)
          write(`converting: ${event.tensors} of ${event.total} tensors${left === undefined ? '' : `, about ${formatDuration(left)} left at this machine's pace`}`)
        }
        break
      case 'convert-done':
        write(`converted in ${event.seconds.toFixed(1)} s; checking that the model loads and runs`)
        break
      case 'verified':
        write(`the converted model loads and runs (checked in ${event.seconds.toFixed(1)} s)`)
        break
    }
  }
}

/** One bar per file on a terminal: bytes, speed and ETA. Call stop() when the pull ends, however it ends. */
export function terminalReporter (stream: NodeJS.WriteStream): { onEvent: (event: PullEvent) => void; stop: () => void } {
  const bars = new MultiBar({
    stream,
    format: ' {name} |{bar}| {percentage}% | {done} of {size} | {speed} | ETA {eta_formatted}',
    hideCursor: true,
    clearOnComplete: false,
    autopadding: true,
    etaBuffer: 50,
    barsize: 20,
    fps: 5,
  }, Presets.shades_classic)
  let current: { bar: SingleBar; meter: RateMeter; size: number } | undefined
  let converting: SingleBar | undefined
  const payload = (meter: RateMeter, bytes: number, size: number) => ({
    done: formatBytes(bytes),
    size: formatBytes(size),
    speed: `${formatBytes(Math.round(meter.rate))}/s`,
  })
  return {
    onEvent (event) {
      switch (event.type) {
        case 'plan':
          for (const f of event.present) bars.log(`${f.path}: already complete\n`)
          break
        case 'file-start': {
          const meter = new RateMeter()
          meter.add(event.resumeFrom)
          current?.bar.stop()
          current = {
            bar: bars.create(event.file.size, event.resumeFrom, { name: event.file.path, ...payload(meter, event.resumeFrom, event.file.size) }),
            meter,
            size: event.file.size,
          }
          break
        }
        case 'file-progress':
          if (current) {
            current.meter.add(event.bytes)
            current.bar.update(event.bytes, payload(current.meter, event.bytes, current.size))
          }
          break
        case 'file-done':
          current?.bar.update(current.size)
          current?.bar.stop()
          current = undefined
          break
        case 'retry':
          bars.log(`${event.error.message}; retrying in ${(event.delayMs / 1000).toFixed(0)} s\n`)
          break
        case 'convert-start':
          converting = bars.create(1, 0, { name: `converting to ${event.weights}`, done: '0', size: '?', speed: 'tensors' })
          break
        case 'convert-progress':
          converting?.setTotal(event.total)
          converting?.update(event.tensors, { done: String(event.tensors), size: String(event.total), speed: 'tensors' })
          break
        case 'convert-done':
          converting?.stop()
          converting = undefined
          bars.log(`converted in ${event.seconds.toFixed(1)} s; checking that the model loads and runs\n`)
          break
        case 'verified':
          bars.log(`the converted model loads and runs (checked in ${event.seconds.toFixed(1)} s)\n`)
          break
      }
    },
    stop () {
      bars.stop()
    },
  }
}
