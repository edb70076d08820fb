/**
 * Encodes a prompt whose message text was quoted (content-quoting.ts): the added tokens the
 * template wrote become their ids, the quoted message text becomes ordinary-text ids even where it
 * spells an added token.
 *
 * `@huggingface/tokenizers` has no switch for "do not match added tokens in this part", so this is
 * its own `encode_text` pipeline, step for step, over the library's public parts (normalizer,
 * pre-tokenizer, model), with the one difference that markers are put back into the text after
 * the split on added tokens instead of before it. A prompt without markers encodes exactly as
 * `encode(text, { add_special_tokens: false })` does (the tests compare the two).
 */
import type { Tokenizer } from '@huggingface/tokenizers'
import type { ContentQuoting } from './content-quoting.ts'
import { TokenSplitter, type SplitPiece } from './token-splitter.ts'

interface AddedTokenInfo {
  id: number
  content: string
  lstrip: boolean
  rstrip: boolean
  normalized: boolean
}

/** The tokenizer's added tokens arranged as the library matches them. */
export class AddedTokenTable {
  /** By raw content, and by normalized content for tokens matched after normalization. */
  readonly byText = new Map<string, AddedTokenInfo>()
  /** Matches tokens with `normalized: false` in the raw text. */
  readonly rawSplitter: TokenSplitter
  /** Matches tokens with `normalized: true` in the normalized text. */
  readonly normalizedSplitter: TokenSplitter
  /** Every text that encode() would turn into an added token's id: what quoting must hide. */
  readonly matchableTexts: string[]

  constructor (inner: Tokenizer) {
    const raw: string[] = []
    const normalized: string[] = []
    for (const [id, token] of inner.get_added_tokens_decoder()) {
      const info = { id, content: token.content, lstrip: token.lstrip, rstrip: token.rstrip, normalized: token.normalized }
      this.byText.set(token.content, info)
      if (token.normalized && inner.normalizer !== null) {
        const form = inner.normalizer(token.content)
        normalized.push(form)
        this.byText.set(form, info)
      } else {
        raw.push(token.content)
      }
    }
    this.rawSplitter = new TokenSplitter(raw)
    this.normalizedSplitter = new TokenSplitter(normalized)
    this.matchableTexts = [...this.byText.keys()]
  }
}

/** Thrown when the prompt is shown to need more than the caller's limit before all of it is encoded. */
export class PromptTooLong extends Error {
  /** A lower bound on the prompt's token count, above the limit. */
  readonly atLeast: number

  constructor (atLeast: number) {
    super(`the prompt has at least ${atLeast} tokens`)
    this.name = 'PromptTooLong'
    this.atLeast = atLeast
  }
}

/**
 * The most characters one token of the model can stand for, when the model is the library's BPE:
 * every token it emits is a vocabulary entry, a byte-fallback byte (a character is at least one
 * byte) or the unknown token for one symbol (one code point, at most 2 UTF-16 units). A piece of
 * n characters therefore costs at least ceil(n / this) tokens. Undefined for other models
 * (WordPiece, for one, may turn a whole word into one unknown token) and for BPE with word
 * suffixes, where no bound is used.
 */
export function longestTokenChars (inner: Tokenizer, table: AddedTokenTable): number | undefined {
  const model = inner.model
  const config = model?.config as
    { type?: string; end_of_word_suffix?: string | null; continuing_subword_suffix?: string | null } | undefined
  if (!model || config?.type !== 'BPE' || config.end_of_word_suffix || config.continuing_subword_suffix) return undefined
  const added = new Set([...table.byText.values()].map(t => t.id))
  let longest = 2
  model.vocab.forEach((token: string, id: number) => {
    if (!added.has(id) && typeof token === 'string' && token.length > longest) longest = token.length
  })
  return longest
}

/** How encodeQuoted may stop early: at more than `maxTokens`, proven with `longestTokenChars`. */
export interface EncodeLimit {
  maxTokens: number
  longestTokenChars: number | undefined
}

/** The two pre-normalization steps of the library, read from tokenizer_config.json. */
export interface LegacyTextOptions {
  removeSpace: boolean
  lowercaseAndRemoveAccents: boolean
}

export function encodeQuoted (
  inner: Tokenizer,
  table: AddedTokenTable,
  options: LegacyTextOptions,
  text: string,
  quoting: ContentQuoting,
  limit?: EncodeLimit
): number[] {
  const sections = stripAroundTokens(table, table.rawSplitter.split(text))
  const ids: number[] = []
  sections.forEach((section, sectionIndex) => {
    if (section.kind === 'word') {
      ids.push(table.byText.get(section.text)!.id)
      return
    }
    for (const part of normalizeAndSplit(inner, table, options, section.text, quoting)) {
      if (part.kind === 'word') {
        ids.push(table.byText.get(part.text)!.id)
        continue
      }
      const words = inner.pre_tokenizer !== null ? inner.pre_tokenizer(part.text, { section_index: sectionIndex }) : [part.text]
      // BPE on one long piece is the costly step (seconds for a megabyte without word breaks):
      // a prompt that cannot fit is refused before it is spent.
      if (limit?.longestTokenChars !== undefined) {
        let atLeast = ids.length
        for (const word of words) atLeast += Math.ceil(word.length / limit.longestTokenChars)
        if (atLeast > limit.maxTokens) throw new PromptTooLong(atLeast)
      }
      for (const token of inner.model!(words)) {
        const id = table.byText.get(token)?.id ?? inner.model!.tokens_to_ids.get(token) ?? inner.model!.unk_token_id
        // Only a vocabulary without an unknown token and without byte coverage can miss; the
        // library would put `undefined` in the ids, which the model cannot take.
        if (id !== undefined) ids.push(id)
      }
    }
    if (limit !== undefined && ids.length > limit.maxTokens) throw new PromptTooLong(ids.length)
  })
  // The template's own tokens after the last stretch of text count too.
  if (limit !== undefined && ids.length > limit.maxTokens) throw new PromptTooLong(ids.length)
  return ids
}

/**
 * One stretch of text between the template's added tokens: normalized, then split on the added
 * tokens that are matched after normalization, with the markers put back as plain text.
 */
function normalizeAndSplit (
  inner: Tokenizer,
  table: AddedTokenTable,
  options: LegacyTextOptions,
  quoted: string,
  quoting: ContentQuoting
): SplitPiece[] {
  if (quoted.length === 0) return []
  // A stretch that is exactly an added token's text (possible only for tokens matched after
  // normalization) is that token, as the library has it.
  if (table.byText.has(quoted)) return [{ kind: 'word', text: quoted }]
  const normalize = (text: string): string => {
    if (options.removeSpace) text = text.trim().split(/\s+/).join(' ')
    if (options.lowercaseAndRemoveAccents) text = text.toLowerCase().replace(/\p{M}/gu, '')
    if (inner.normalizer !== null) text = inner.normalizer(text)
    return text
  }
  const markers = quoting.markers(quoted)
  const normalized = normalize(quoted)
  if (normalized.length === 0) return []
  if (markers > 0 && quoting.markers(normalized) !== markers) {
    // The normalizer altered a marker. Normalize the real text instead and match no added token
    // in it: the message's text stays text (a normalized token of the template in this same
    // stretch would be encoded as text too, which costs fidelity, not safety).
    return [{ kind: 'text', text: normalize(quoting.unquote(quoted)) }]
  }
  return stripAroundTokens(table, table.normalizedSplitter.split(normalized)).map(piece => {
    if (piece.kind === 'word') return piece
    if (table.byText.has(piece.text)) return { kind: 'word', text: piece.text }
    return { kind: 'text', text: quoting.unquote(piece.text) }
  })
}

/** Added tokens with lstrip/rstrip eat the whitespace beside them, as the library does. */
function stripAroundTokens (table: AddedTokenTable, pieces: SplitPiece[]): SplitPiece[] {
  pieces.forEach((piece, i) => {
    if (piece.kind !== 'word') return
    const token = table.byText.get(piece.text)!
    const before = pieces[i - 1]
    const after = pieces[i + 1]
    if (token.lstrip && before?.kind === 'text') pieces[i - 1] = { kind: 'text', text: before.text.trimEnd() }
    if (token.rstrip && after?.kind === 'text') pieces[i + 1] = { kind: 'text', text: after.text.trimStart() }
  })
  return pieces
}
