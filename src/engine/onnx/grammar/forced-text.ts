// The ids that write a fixed text exactly (a forced tool call's opening, the text after a name, its
// closing), whatever the tokenizer's pre-tokenizer would add on its own (a SentencePiece model puts
// a space before text encoded alone): at each point the longest token whose bytes come next.
// Added tokens (R1's tool tokens) are found the same way, their bytes being their text; special
// tokens are never used, since the reply's text leaves them out and the call must parse from it.
import type { TokenTable } from '../text/token-bytes.ts'

export class ForcedText {
  /** Each token's bytes (as a latin1 string) to its id, the lowest id where several have the same bytes. */
  readonly #byBytes = new Map<string, number>()
  #longest = 0

  constructor (tokens: TokenTable, vocab: number, special: ReadonlySet<number>) {
    for (let id = Math.min(tokens.size, vocab) - 1; id >= 0; id--) {
      if (special.has(id)) continue
      const bytes = tokens.bytes(id)
      if (bytes.length === 0) continue
      this.#byBytes.set(Buffer.from(bytes).toString('latin1'), id)
      this.#longest = Math.max(this.#longest, bytes.length)
    }
  }

  /** The ids of `text`; throws when some byte has no token (the vocabulary cannot write it). */
  ids (text: string): number[] {
    const bytes = Buffer.from(text, 'utf8').toString('latin1')
    const ids: number[] = []
    for (let at = 0; at < bytes.length;) {
      let length = Math.min(this.#longest, bytes.length - at)
      let found = this.#byBytes.get(bytes.slice(at, at + length))
      while (found === undefined && --length > 0) found = this.#byBytes.get(bytes.slice(at, at + length))
      if (found === undefined) throw new Error(`the vocabulary cannot write ${JSON.stringify(text)}`)
      ids.push(found)
      at += length
    }
    return ids
  }
}
