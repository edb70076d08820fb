/**
 * Finds whole words of a fixed list (a tokenizer's added tokens) in a text, with the rule
 * `@huggingface/tokenizers` uses to split text on its added tokens: scan left to right, and at
 * the first position where some word starts, take the longest word that starts there.
 *
 * The prompt encoder and the content quoting both need exactly that rule: quoting must hide
 * every occurrence the tokenizer would have matched, and the encoder must split where the
 * tokenizer would have split.
 */

interface TrieNode {
  next: Map<string, TrieNode>
  /** The word that ends at this node, if any. */
  word?: string
}

export type SplitPiece = { kind: 'text'; text: string } | { kind: 'word'; text: string }

export class TokenSplitter {
  readonly #root: TrieNode = { next: new Map() }
  readonly size: number

  constructor (words: Iterable<string>) {
    let size = 0
    for (const word of words) {
      if (word.length === 0) continue
      let node = this.#root
      for (const unit of word) {
        let child = node.next.get(unit)
        if (!child) {
          child = { next: new Map() }
          node.next.set(unit, child)
        }
        node = child
      }
      if (node.word === undefined) size++
      node.word = word
    }
    this.size = size
  }

  /** The longest word starting at `at`, or undefined. */
  matchAt (text: string, at: number): string | undefined {
    let node: TrieNode | undefined = this.#root
    let match: string | undefined
    let i = at
    while (i < text.length) {
      // Walk by code point, as the words were inserted, so a surrogate pair stays one step.
      const unit = String.fromCodePoint(text.codePointAt(i)!)
      node = node.next.get(unit)
      if (!node) break
      if (node.word !== undefined) match = node.word
      i += unit.length
    }
    return match
  }

  /** The text cut into words of the list and the text between them, in order; empty text is left out. */
  split (text: string): SplitPiece[] {
    const pieces: SplitPiece[] = []
    if (this.size === 0) return text === '' ? pieces : [{ kind: 'text', text }]
    let start = 0
    let i = 0
    while (i < text.length) {
      const word = this.matchAt(text, i)
      if (word === undefined) {
        i++
        continue
      }
      if (i > start) pieces.push({ kind: 'text', text: text.slice(start, i) })
      pieces.push({ kind: 'word', text: word })
      i += word.length
      start = i
    }
    if (start < text.length) pieces.push({ kind: 'text', text: text.slice(start) })
    return pieces
  }
}
