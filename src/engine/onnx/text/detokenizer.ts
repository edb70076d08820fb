/**
 * Incremental detokenization for streaming: turns generated ids into text pieces as they arrive,
 * without ever sending half a character.
 *
 * Decoding one token at a time is wrong in two ways:
 *  - a character may span several tokens (byte-fallback tokens `<0xE6><0x97><0xA5>`, or byte-level
 *    BPE pieces); decoding an incomplete byte run yields U+FFFD;
 *  - SentencePiece decoders strip the leading space of the decoded text ("▁was" alone decodes to
 *    "was"), so a token's text depends on what precedes it.
 * So each step decodes a short window `prefix + pending` and emits
 * `decode(prefix + pending) - decode(prefix)`: the prefix (the tokens emitted in the previous step)
 * absorbs the leading-space strip and any context effect, and the difference is exactly the new
 * text. While the window's text ends in U+FFFD the character is incomplete, so nothing is emitted
 * and the tokens stay pending. After an emission the pending tokens become the next prefix, so the
 * window stays a few tokens long and each step costs O(1) decodes of O(1) tokens.
 *
 * Joined, the pieces equal `decode(generated)`; with prompt ids they equal
 * `decode(prompt + generated)` minus `decode(prompt)` (so a first token "▁was" keeps its space).
 */

/** What the detokenizer needs from a tokenizer (TextTokenizer provides it). */
export interface DetokenizerTokenizer {
  decode(ids: readonly number[], options?: { skipSpecialTokens?: boolean }): string;
  readonly specialTokenIds: ReadonlySet<number>;
}

export interface DetokenizerOptions {
  /** Leave special tokens (BOS, EOS, ...) out of the text. Default true, as chat servers do. */
  skipSpecialTokens?: boolean;
}

/** Prompt tokens used as the starting context: enough for any decoder's context effect. */
const PROMPT_CONTEXT_TOKENS = 6
/** Extra prompt tokens we may reach back to find a start that is not mid-character. */
const PROMPT_CONTEXT_MAX = 16
/**
 * A UTF-8 character has at most 4 bytes, so a real incomplete character is completed within a few
 * tokens. If the window still ends in U+FFFD after this many pending tokens, the bytes are invalid
 * (or the text really contains U+FFFD): emit them rather than hold text back forever.
 */
const MAX_PENDING_TOKENS = 8

const REPLACEMENT = '\uFFFD'

export class IncrementalDetokenizer {
  #tokenizer: DetokenizerTokenizer
  #skipSpecial: boolean
  /** The window: `#ids.slice(0, #readOffset)` is the prefix (already emitted), the rest pending. */
  #ids: number[]
  #readOffset: number
  /** decode(prefix), cached: the prefix only changes when we emit. */
  #prefixText: string

  constructor (tokenizer: DetokenizerTokenizer, promptIds: readonly number[] = [], options: DetokenizerOptions = {}) {
    this.#tokenizer = tokenizer
    this.#skipSpecial = options.skipSpecialTokens ?? true
    this.#ids = this.#promptContext(promptIds)
    this.#readOffset = this.#ids.length
    this.#prefixText = this.#decode(this.#ids)
  }

  /** Adds one generated id; returns the text that became complete (often '', never partial). */
  push (id: number): string {
    // Skipped specials are kept out of the window entirely: a window that starts with a special
    // would otherwise lose the leading-space context the prefix is there to provide.
    if (this.#skipSpecial && this.#tokenizer.specialTokenIds.has(id)) return ''
    this.#ids.push(id)
    const text = this.#decode(this.#ids)
    const pending = this.#ids.length - this.#readOffset
    if (text.endsWith(REPLACEMENT) && pending < MAX_PENDING_TOKENS) return ''
    return this.#emit(text)
  }

  /** Whether tokens are held back (their text ends in an incomplete character). */
  get holding (): boolean {
    return this.#ids.length > this.#readOffset
  }

  /** Returns whatever is still held (an incomplete character at the end of generation). */
  flush (): string {
    if (this.#ids.length === this.#readOffset) return ''
    return this.#emit(this.#decode(this.#ids))
  }

  #emit (text: string): string {
    // decode(prefix + pending) starts with decode(prefix) for the decoders in use (byte fallback,
    // byte-level, metaspace), because the prefix ends on a character boundary.
    const piece = text.slice(this.#prefixText.length)
    // The pending tokens become the next prefix; everything before them is dropped.
    this.#ids = this.#ids.slice(this.#readOffset)
    this.#readOffset = this.#ids.length
    this.#prefixText = this.#decode(this.#ids)
    return piece
  }

  #decode (ids: readonly number[]): string {
    // Specials never enter the window when skipping, so the plain decode is the right one.
    return this.#tokenizer.decode(ids, { skipSpecialTokens: false })
  }

  /**
   * The last few prompt tokens, as the context for the first generated token. The start is moved
   * back while it would cut a character (its text starts with U+FFFD), so the context itself is
   * clean text.
   */
  #promptContext (promptIds: readonly number[]): number[] {
    const ids = this.#skipSpecial ? promptIds.filter((id) => !this.#tokenizer.specialTokenIds.has(id)) : [...promptIds]
    let start = Math.max(0, ids.length - PROMPT_CONTEXT_TOKENS)
    const limit = Math.max(0, ids.length - PROMPT_CONTEXT_MAX)
    while (start > limit && this.#decode(ids.slice(start)).startsWith(REPLACEMENT)) start--
    return ids.slice(start)
  }
}
