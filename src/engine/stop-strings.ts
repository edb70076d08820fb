/**
 * Stop strings for streamed text: the text before the first stop string goes out, the stop string
 * and everything after it never do, even when the stop string arrives split across tokens.
 *
 * With several stop strings, the one completed first in the text wins (see push).
 *
 * The matcher holds back the longest tail of the text seen so far that could still grow into a
 * stop string (a proper prefix of one), and releases it as soon as it cannot. So the held text is
 * always shorter than the longest stop string, and each push costs O(held + new text) per stop.
 */

export interface StopPushResult {
  /** Text that is now safe to send (may be ''). */
  emit: string;
  /** A stop string was found: generation should end; `emit` holds the text before it. */
  stopped: boolean;
}

export class StopStringMatcher {
  readonly stops: readonly string[]
  #held = ''
  #stopped = false
  #matched: string | null = null

  /** @param stops the stop strings; empty strings are ignored (they would match everywhere). */
  constructor (stops: readonly string[]) {
    this.stops = stops.filter((s) => s.length > 0)
  }

  /** Whether a stop string has been seen; later pushes emit nothing. */
  get stopped (): boolean {
    return this.#stopped
  }

  /** Characters held back because they could still become a stop string. */
  get heldLength (): number {
    return this.#held.length
  }

  /** The stop string that ended the text, or null. */
  get matchedStop (): string | null {
    return this.#matched
  }

  push (text: string): StopPushResult {
    if (this.#stopped) return { emit: '', stopped: true }
    if (this.stops.length === 0) return { emit: text, stopped: false }

    const buffer = this.#held + text
    // The stop string that is complete first, reading the text in order, wins (on a tie, the one
    // that starts earlier). Generation ends the moment a stop string is complete, so this is the
    // only rule that gives the same result however the text is cut into tokens.
    let cut = -1
    let cutEnd = Infinity
    for (const stop of this.stops) {
      const at = buffer.indexOf(stop)
      if (at < 0) continue
      const end = at + stop.length
      if (end < cutEnd || (end === cutEnd && at < cut)) {
        cut = at
        cutEnd = end
        this.#matched = stop
      }
    }
    if (cut >= 0) {
      this.#stopped = true
      this.#held = ''
      return { emit: buffer.slice(0, cut), stopped: true }
    }

    const hold = longestStopPrefixSuffix(buffer, this.stops)
    this.#held = buffer.slice(buffer.length - hold)
    return { emit: buffer.slice(0, buffer.length - hold), stopped: false }
  }

  /** At the end of generation: the held text was not a stop string after all. */
  flush (): string {
    const rest = this.#held
    this.#held = ''
    return rest
  }
}

/** Length of the longest suffix of `text` that is a proper prefix of some stop string. */
function longestStopPrefixSuffix (text: string, stops: readonly string[]): number {
  let best = 0
  for (const stop of stops) {
    // Only lengths longer than the best so far matter; a full match was already ruled out.
    for (let len = Math.min(stop.length - 1, text.length); len > best; len--) {
      if (text.endsWith(stop.slice(0, len))) {
        best = len
        break
      }
    }
  }
  return best
}
