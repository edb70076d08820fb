/**
 * Stop strings for streamed text: the text before the first stop string goes out, the stop string
 * and everything after it never do, even when the stop string arrives split across tokens.
 *
 * With several stop strings, the one completed first in the text wins (see push).
 *
 * The matcher holds back the longest tail of the text seen so far that could still grow into a
 * stop string (a proper prefix of one), and releases it as soon as it cannot. So the held text is
 * always shorter than the longest stop string. Each stop string is followed by a Knuth-Morris-Pratt
 * automaton (its state: the longest prefix of it that the text ends with), so the work is linear in
 * the text and the stop strings, whatever they hold: a client's stop strings are as long as the body
 * allows, and a naive rescan of the held text per token would be quadratic on the engine's thread.
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
  readonly #automata: StopAutomaton[]

  /** @param stops the stop strings; empty strings are ignored (they would match everywhere). */
  constructor (stops: readonly string[]) {
    this.stops = stops.filter((s) => s.length > 0)
    this.#automata = this.stops.map(stop => new StopAutomaton(stop))
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
    if (this.#automata.length === 0) return { emit: text, stopped: false }

    const buffer = this.#held + text
    // The stop string that is complete first, reading the text in order, wins (on a tie, the one
    // that starts earlier: the longer). Generation ends the moment a stop string is complete, so
    // this is the only rule that gives the same result however the text is cut into tokens.
    for (let i = this.#held.length; i < buffer.length; i++) {
      const unit = buffer.charCodeAt(i)
      let complete: StopAutomaton | undefined
      for (const automaton of this.#automata) {
        if (automaton.advance(unit) && (complete === undefined || automaton.stop.length > complete.stop.length)) complete = automaton
      }
      if (complete !== undefined) {
        this.#stopped = true
        this.#matched = complete.stop
        this.#held = ''
        return { emit: buffer.slice(0, i + 1 - complete.stop.length), stopped: true }
      }
    }
    let hold = 0
    for (const automaton of this.#automata) hold = Math.max(hold, automaton.state)
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

/** One stop string's Knuth-Morris-Pratt automaton over UTF-16 code units. */
class StopAutomaton {
  readonly stop: string
  /** The length of the longest prefix of the stop string that the text read so far ends with. */
  state = 0
  /** fallback[k]: the longest proper prefix of stop[0..k] that is also its suffix (the failure function). */
  readonly #fallback: Uint32Array

  constructor (stop: string) {
    this.stop = stop
    this.#fallback = new Uint32Array(stop.length)
    for (let i = 1, k = 0; i < stop.length; i++) {
      while (k > 0 && stop.charCodeAt(i) !== stop.charCodeAt(k)) k = this.#fallback[k - 1]!
      if (stop.charCodeAt(i) === stop.charCodeAt(k)) k++
      this.#fallback[i] = k
    }
  }

  /** Reads one code unit; true when the stop string is complete. Amortised O(1): state grows by at most one a unit. */
  advance (unit: number): boolean {
    let k = this.state
    if (k === this.stop.length) k = this.#fallback[k - 1]!
    while (k > 0 && unit !== this.stop.charCodeAt(k)) k = this.#fallback[k - 1]!
    if (unit === this.stop.charCodeAt(k)) k++
    this.state = k
    return k === this.stop.length
  }
}
