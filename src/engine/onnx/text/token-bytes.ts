// The bytes each token id stands for. Token log-probabilities report them
// (`bytes`, and `token` as text), and the grammar engine matches them: a JSON
// grammar has to know which bytes a token would add to the reply.
//
// A vocabulary entry is not its text. tokenizer.json's decoder says how an
// entry becomes text, and the three in use are undone here, entry by entry:
//  - ByteLevel (GPT-2, Qwen): every byte is written as one printable character
//    ("Ġ" is the space); the table is inverted;
//  - Metaspace / Replace "▁" -> " " (SentencePiece, Llama): "▁" is the space;
//  - ByteFallback: entries "<0xE6>" are that one byte (part of a character).
// Added tokens (`<think>`, `</s>`) are their content as written.
// Decoders that only trim the whole text's first space (Strip) are left out:
// a token's bytes are what it adds in the middle of a text, and the engine's
// detokenizer keeps that space too (detokenizer.ts decodes after the prompt).

/** How tokenizer.json's decoder turns one vocabulary entry into text. */
export interface PieceDecoding {
  /** Entries spell bytes with GPT-2's byte-to-character table. */
  byteLevel: boolean
  /** Entries `<0xNN>` are single bytes. */
  byteFallback: boolean
  /** Literal replacements, in order (Metaspace's and Replace's, e.g. "▁" -> " "). */
  replacements: Array<[string, string]>
}

type Json = Record<string, unknown>

function isObject (value: unknown): value is Json {
  return typeof value === 'object' && value !== null && !Array.isArray(value)
}

/** Reads the decoder (and the model's byte_fallback) of a parsed tokenizer.json. */
export function pieceDecodingOf (tokenizerJson: Json): PieceDecoding {
  const decoding: PieceDecoding = { byteLevel: false, byteFallback: false, replacements: [] }
  const visit = (decoder: unknown): void => {
    if (!isObject(decoder)) return
    switch (decoder.type) {
      case 'Sequence':
        for (const inner of Array.isArray(decoder.decoders) ? decoder.decoders : []) visit(inner)
        break
      case 'ByteLevel':
        decoding.byteLevel = true
        break
      case 'ByteFallback':
        decoding.byteFallback = true
        break
      case 'Metaspace':
        decoding.replacements.push([typeof decoder.replacement === 'string' ? decoder.replacement : '\u2581', ' '])
        break
      case 'Replace': {
        const pattern = isObject(decoder.pattern) ? decoder.pattern.String : undefined
        if (typeof pattern === 'string' && typeof decoder.content === 'string') decoding.replacements.push([pattern, decoder.content])
        break
      }
    }
  }
  visit(tokenizerJson.decoder)
  const model = tokenizerJson.model
  if (isObject(model) && model.byte_fallback === true) decoding.byteFallback = true
  return decoding
}

/** GPT-2's byte -> printable character table, inverted: character code -> byte. */
const BYTE_OF_CHAR = ((): Map<number, number> => {
  const map = new Map<number, number>()
  let shifted = 0
  for (let byte = 0; byte < 256; byte++) {
    const printable = (byte >= 0x21 && byte <= 0x7e) || (byte >= 0xa1 && byte <= 0xac) || (byte >= 0xae && byte <= 0xff)
    map.set(printable ? byte : 256 + shifted++, byte)
  }
  return map
})()

const BYTE_TOKEN = /^<0x([0-9A-Fa-f]{2})>$/
const utf8 = new TextEncoder()
const EMPTY = new Uint8Array(0)

/** What the byte table reads from a tokenizer (TextTokenizer provides it). */
export interface TokenSource {
  readonly vocabSize: number
  readonly specialTokenIds: ReadonlySet<number>
  readonly addedTokenIds: ReadonlySet<number>
  readonly pieceDecoding: PieceDecoding
  idToToken (id: number): string | undefined
}

/** The bytes token `id` adds to a text; empty for an id with no entry. */
export function tokenBytes (source: TokenSource, id: number): Uint8Array {
  const entry = source.idToToken(id)
  if (entry === undefined) return EMPTY
  if (source.addedTokenIds.has(id)) return utf8.encode(entry)
  const decoding = source.pieceDecoding
  if (decoding.byteFallback) {
    const byte = BYTE_TOKEN.exec(entry)
    if (byte) return Uint8Array.of(parseInt(byte[1], 16))
  }
  let text = entry
  for (const [from, to] of decoding.replacements) text = text.replaceAll(from, to)
  if (!decoding.byteLevel) return utf8.encode(text)
  const bytes: number[] = []
  for (const char of text) {
    const byte = BYTE_OF_CHAR.get(char.codePointAt(0) as number)
    // A character outside the table (not written by a byte-level model) stands for itself.
    if (byte === undefined) bytes.push(...utf8.encode(char))
    else bytes.push(byte)
  }
  return Uint8Array.from(bytes)
}

/**
 * Every token's bytes and text, built on first use (a 150k vocabulary takes a moment) and kept:
 * a model that is never asked for logprobs or JSON never builds it.
 */
export class TokenTable {
  readonly #source: TokenSource
  #bytes: Uint8Array[] | null = null
  readonly #decoder = new TextDecoder('utf-8', { fatal: false })

  constructor (source: TokenSource) {
    this.#source = source
  }

  get size (): number {
    return this.#source.vocabSize
  }

  /** The bytes of token `id` (an added token's content, special ones included). */
  bytes (id: number): Uint8Array {
    return this.#all()[id] ?? EMPTY
  }

  /** Token `id` as text; bytes that are part of a character show as U+FFFD (`bytes` has them exactly). */
  text (id: number): string {
    return this.#decoder.decode(this.bytes(id))
  }

  /**
   * The vocabulary as the grammar engine takes it: each id's bytes, and nothing for special tokens
   * (BOS, EOS, `<|im_end|>`): a grammar then never allows them inside the text, and ends with the
   * stop ids it is given.
   */
  grammarVocabulary (): Uint8Array[] {
    const special = this.#source.specialTokenIds
    return this.#all().map((bytes, id) => special.has(id) ? EMPTY : bytes)
  }

  #all (): Uint8Array[] {
    this.#bytes ??= Array.from({ length: this.#source.vocabSize }, (_, id) => tokenBytes(this.#source, id))
    return this.#bytes
  }
}
