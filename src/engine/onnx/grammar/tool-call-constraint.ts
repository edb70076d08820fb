// A tool call written by construction (tool_choice `required` or a named tool): one constraint on
// the answer, on the same path as a JSON response_format's. It allows the family's opening, then
// one of the allowed tools' names (each followed by the text that comes after a name), then the
// arguments under the chosen tool's compiled grammar, then the closing, then only the end of the
// sequence. Fixed text is forced by a mask that allows its next token alone.
import type { Constraint } from './grammar.ts'

export interface CallChoice {
  /** The ids of the name and the text after it. */
  ids: number[]
  /** The grammar of this tool's arguments (made when the name is chosen). */
  arguments: () => Constraint
}

type Phase = 'open' | 'name' | 'arguments' | 'close' | 'end'

export class ToolCallConstraint implements Constraint {
  readonly #open: number[]
  readonly #names: CallChoice[]
  readonly #close: number[]
  readonly #stopIds: number[]
  /** The logits' width (the model's valid vocabulary). */
  readonly #vocab: number
  #phase: Phase = 'open'
  /** Ids taken in the current fixed part (opening, name, closing). */
  #taken: number[] = []
  #arguments: Constraint | undefined
  /** The next allowed ids; null: the arguments' grammar decides (its mask is in #scratch). */
  #allowed: number[] | null = null
  /** The arguments' mask as logits (0 allowed, -Infinity not): read once per step. */
  #scratch: Float32Array | undefined
  #disposed = false

  constructor (opts: { open: number[]; names: CallChoice[]; close: number[]; stopIds: number[]; vocab: number }) {
    if (opts.names.length === 0 || opts.names.some(n => n.ids.length === 0)) throw new Error('a tool call needs names to choose from')
    this.#open = opts.open
    this.#names = opts.names
    this.#close = opts.close
    this.#stopIds = opts.stopIds
    this.#vocab = opts.vocab
    if (this.#open.length === 0) this.#phase = 'name'
  }

  /** The name chosen so far: the choices the ids taken still match. */
  #candidates (): CallChoice[] {
    const taken = this.#taken
    return this.#names.filter(n => n.ids.length > taken.length && taken.every((id, i) => n.ids[i] === id))
  }

  async prepare (): Promise<void> {
    switch (this.#phase) {
      case 'open':
        this.#allowed = [this.#open[this.#taken.length]]
        return
      case 'name':
        this.#allowed = [...new Set(this.#candidates().map(n => n.ids[this.#taken.length]))]
        return
      case 'close':
        this.#allowed = [this.#close[this.#taken.length]]
        return
      case 'end':
        this.#allowed = this.#stopIds
        return
      case 'arguments': {
        const args = this.#arguments as Constraint
        await args.prepare()
        const scratch = this.#scratch as Float32Array
        scratch.fill(0)
        args.apply(scratch, scratch.length)
        // One-line JSON allows the end of the sequence only once the object is complete: then the closing follows.
        if (this.#stopIds.some(id => scratch[id] === 0)) {
          this.#phase = this.#close.length > 0 ? 'close' : 'end'
          this.#taken = []
          return this.prepare()
        }
        this.#allowed = null
      }
    }
  }

  apply (logits: Float32Array, n: number): void {
    const allowed = this.#allowed
    if (allowed === null) {
      const scratch = this.#scratch
      if (!scratch) throw new Error('a constraint applied before prepare()')
      const end = Math.min(n, scratch.length)
      for (let id = 0; id < end; id++) if (scratch[id] !== 0) logits[id] = -Infinity
      if (end < n) logits.fill(-Infinity, end, n)
      return
    }
    const kept = allowed.filter(id => id < n).map(id => [id, logits[id]] as const)
    logits.fill(-Infinity, 0, n)
    // A forced token whose logit was -Infinity stays possible: the call is written whatever the model says.
    for (const [id, value] of kept) logits[id] = value === -Infinity ? 0 : value
  }

  accept (id: number): boolean {
    if (this.#phase === 'arguments') return (this.#arguments as Constraint).accept(id)
    if (this.#allowed === null || !this.#allowed.includes(id)) return false
    this.#allowed = null
    if (this.#phase === 'end') return true
    this.#taken.push(id)
    if (this.#phase === 'open' && this.#taken.length === this.#open.length) {
      this.#phase = 'name'
      this.#taken = []
    } else if (this.#phase === 'name') {
      const chosen = this.#names.find(n => n.ids.length === this.#taken.length && this.#taken.every((t, i) => n.ids[i] === t))
      if (chosen) {
        this.#phase = 'arguments'
        this.#taken = []
        this.#arguments = chosen.arguments()
        this.#scratch = new Float32Array(this.#vocab)
        if (this.#disposed) this.#arguments.dispose()
      }
    } else if (this.#phase === 'close' && this.#taken.length === this.#close.length) {
      this.#phase = 'end'
      this.#taken = []
    }
    return true
  }

  dispose (): void {
    if (this.#disposed) return
    this.#disposed = true
    this.#arguments?.dispose()
  }
}
