/**
 * Keeps message text from turning into control tokens.
 *
 * The chat template writes the prompt's control tokens (BOS, `<｜User｜>`, `<|im_end|>`, ...) as
 * text, and the tokenizer turns every occurrence of an added token's text into its id. A message
 * that contains such text (`</s>`, `<｜end▁of▁sentence｜>`, `<think>`) would therefore end the
 * turn, start a fake one, or open a reasoning block: prompt-template injection.
 *
 * So the engine quotes the messages before the template sees them: every occurrence of an added
 * token's text is replaced by a marker that no tokenizer matches, the template renders, the
 * tokenizer splits the result on the added tokens that are left (only the template's own), and
 * each marker is put back as the original text, which is then encoded as ordinary text.
 *
 * A marker is U+FDD0, the index of the quoted word in decimal, U+FDD1. U+FDD0..U+FDD1 are
 * Unicode noncharacters: no template writes them, and normalizers leave them alone. A literal
 * U+FDD0 in a message is quoted too, so unquoting gives back exactly what the client sent.
 */
import { TokenSplitter } from './token-splitter.ts'

const OPEN = '\uFDD0'
const CLOSE = '\uFDD1'
const MARKER = /\uFDD0(\d+)\uFDD1/g

export class ContentQuoting {
  /** The quoted words by index; the marker holds the index. */
  readonly #words: string[]
  readonly #indexOf: Map<string, number>
  readonly #splitter: TokenSplitter

  /** @param words the texts the tokenizer would match as added tokens (raw and normalized spellings) */
  constructor (words: Iterable<string>) {
    this.#words = [...new Set([...words, OPEN])].filter(w => w.length > 0)
    this.#indexOf = new Map(this.#words.map((word, index) => [word, index]))
    this.#splitter = new TokenSplitter(this.#words)
  }

  /** `text` with every word of the list replaced by its marker. */
  quote (text: string): string {
    if (!this.#holdsAnyWord(text)) return text
    let out = ''
    for (const piece of this.#splitter.split(text)) {
      out += piece.kind === 'word' ? `${OPEN}${this.#indexOf.get(piece.text)}${CLOSE}` : piece.text
    }
    return out
  }

  /** `text` with every marker replaced by the word it stands for. */
  unquote (text: string): string {
    if (!text.includes(OPEN)) return text
    return text.replace(MARKER, (marker, index: string) => this.#words[Number(index)] ?? marker)
  }

  /** Number of markers in `text`. */
  markers (text: string): number {
    return text.match(MARKER)?.length ?? 0
  }

  /** The usual message holds none of the words; it is returned as it is, without a split. */
  #holdsAnyWord (text: string): boolean {
    for (const word of this.#words) if (text.includes(word)) return true
    return false
  }
}
