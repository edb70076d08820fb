/**
 * The model's tokenizer: `tokenizer.json` + `tokenizer_config.json` from a Hugging Face model
 * directory, run by `@huggingface/tokenizers`.
 *
 * This wrapper exists to give the engine a small, stable surface over that package and to paper
 * over its sharp edges: `decode([])` throws there, `clean_up_tokenization_spaces` defaults to true
 * when the config omits it (which would make streamed text differ from decoded text), and special
 * tokens come from two places (added tokens flagged `special`, and the config's
 * `additional_special_tokens`).
 */
import { readFile } from 'node:fs/promises'
import { join } from 'node:path'
import { Tokenizer } from '@huggingface/tokenizers'
import { ContentQuoting } from './content-quoting.ts'
import { AddedTokenTable, encodeQuoted, longestTokenChars, type LegacyTextOptions } from './quoted-encoding.ts'
import { pieceDecodingOf, type PieceDecoding } from './token-bytes.ts'

export interface EncodeOptions {
  /** Let the post-processor add BOS/EOS etc. Default true (the library's default). Use false for
   * text rendered by a chat template, which already holds BOS. */
  addSpecialTokens?: boolean;
}

export interface DecodeOptions {
  /** Drop special tokens (BOS, EOS, ...) from the text. Default false. */
  skipSpecialTokens?: boolean;
}

/** The parts of tokenizer_config.json this engine reads. Other keys are kept but untyped. */
export interface TokenizerConfig {
  bos_token?: SpecialTokenValue;
  eos_token?: SpecialTokenValue;
  chat_template?: string | { name: string; template: string }[];
  clean_up_tokenization_spaces?: boolean;
  additional_special_tokens?: SpecialTokenValue[];
  [key: string]: unknown;
}

/** tokenizer_config.json writes special tokens either as a plain string or as an AddedToken
 * object (`{"__type": "AddedToken", "content": "..."}`). */
export type SpecialTokenValue = string | { content: string; [key: string]: unknown } | null

/** The string of a special-token entry, or null when it is absent or null. */
export function specialTokenContent (value: unknown): string | null {
  if (typeof value === 'string') return value
  if (value !== null && typeof value === 'object' && typeof (value as { content?: unknown }).content === 'string') {
    return (value as { content: string }).content
  }
  return null
}

/**
 * Reads and parses one JSON file of a model directory. Errors name the file and say whether it is
 * missing, unreadable or not valid JSON, because a half-downloaded model dir is the usual cause.
 */
export async function readModelJson (path: string): Promise<unknown> {
  let text: string
  try {
    text = await readFile(path, 'utf8')
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code
    if (code === 'ENOENT') throw new Error(`${path}: file not found`, { cause: err })
    throw new Error(`${path}: cannot read file (${code ?? (err as Error).message})`, { cause: err })
  }
  try {
    return JSON.parse(text)
  } catch (err) {
    throw new Error(`${path}: invalid JSON (${(err as Error).message})`, { cause: err })
  }
}

function requireObject (value: unknown, path: string): Record<string, unknown> {
  if (value === null || typeof value !== 'object' || Array.isArray(value)) {
    throw new Error(`${path}: expected a JSON object at the top level`)
  }
  return value as Record<string, unknown>
}

export class TextTokenizer {
  /** Number of real token ids (model vocabulary plus added tokens): max id + 1. The model's logits
   * may be wider (padding); ids at or above this are never valid output. */
  readonly vocabSize: number
  readonly bosToken: string | null
  readonly eosToken: string | null
  /** Ids that `skipSpecialTokens` removes when decoding. */
  readonly specialTokenIds: ReadonlySet<number>
  /** The parsed tokenizer_config.json (the chat template reads it too). */
  readonly config: TokenizerConfig
  /** Hides, in message text, every text this tokenizer matches as an added token (content-quoting.ts). */
  readonly quoting: ContentQuoting
  /** Ids of the added tokens (special or not): their text is their content, as written. */
  readonly addedTokenIds: ReadonlySet<number>
  /** How a vocabulary entry becomes bytes (tokenizer.json's decoder): token-bytes.ts. */
  readonly pieceDecoding: PieceDecoding

  // `#inner` rather than `private`: real privacy, and it is erasable syntax.
  #inner: Tokenizer
  #addedTokens: AddedTokenTable
  #legacyText: LegacyTextOptions
  #longestTokenChars: number | undefined

  /**
   * @param tokenizerJson parsed tokenizer.json
   * @param config parsed tokenizer_config.json
   * @param source where the JSON came from, for error messages
   */
  constructor (tokenizerJson: unknown, config: unknown, source = 'tokenizer.json') {
    const json = requireObject(tokenizerJson, source)
    const cfg = requireObject(config ?? {}, 'tokenizer_config.json') as TokenizerConfig
    this.config = cfg
    // Modern transformers decodes without the old English-centric space clean-up unless the config
    // asks for it; the library defaults it to on, which would also break incremental decoding.
    const libConfig = { ...cfg, clean_up_tokenization_spaces: cfg.clean_up_tokenization_spaces === true }
    // The library wants plain strings here.
    libConfig.additional_special_tokens = (cfg.additional_special_tokens ?? [])
      .map(specialTokenContent)
      .filter((s): s is string => s !== null)
    try {
      this.#inner = new Tokenizer(json, libConfig)
    } catch (err) {
      throw new Error(`${source}: not a tokenizer the library can load (${(err as Error).message})`, { cause: err })
    }

    let maxId = -1
    for (const id of this.#inner.get_vocab(true).values()) if (id > maxId) maxId = id
    this.vocabSize = maxId + 1

    this.bosToken = specialTokenContent(cfg.bos_token)
    this.eosToken = specialTokenContent(cfg.eos_token)

    // The same set the library filters on (added tokens flagged special, plus the config's extra
    // specials), as ids, so the detokenizer can filter before decoding and agree with decode().
    const special = new Set<number>()
    for (const [id, token] of this.#inner.get_added_tokens_decoder()) if (token.special) special.add(id)
    for (const content of libConfig.additional_special_tokens) {
      const id = this.#inner.token_to_id(content)
      if (id !== undefined) special.add(id)
    }
    this.specialTokenIds = special

    this.addedTokenIds = new Set(this.#inner.get_added_tokens_decoder().keys())
    this.pieceDecoding = pieceDecodingOf(json)
    this.#addedTokens = new AddedTokenTable(this.#inner)
    this.#legacyText = { removeSpace: cfg.remove_space === true, lowercaseAndRemoveAccents: cfg.do_lowercase_and_remove_accent === true }
    this.quoting = new ContentQuoting(this.#addedTokens.matchableTexts)
    this.#longestTokenChars = longestTokenChars(this.#inner, this.#addedTokens)
  }

  /**
   * Encodes a prompt rendered from messages quoted with `this.quoting`, without adding special
   * tokens: the added tokens written by the template become their ids, the messages' text becomes
   * ordinary-text ids even where it spells an added token (see quoted-encoding.ts).
   *
   * With `maxTokens`, throws PromptTooLong as soon as the prompt is shown to need more tokens
   * than that, often before the costly part of encoding a long text.
   */
  encodeQuoted (text: string, maxTokens?: number): number[] {
    const limit = maxTokens === undefined ? undefined : { maxTokens, longestTokenChars: this.#longestTokenChars }
    return encodeQuoted(this.#inner, this.#addedTokens, this.#legacyText, text, this.quoting, limit)
  }

  encode (text: string, options: EncodeOptions = {}): number[] {
    return this.#inner.encode(text, { add_special_tokens: options.addSpecialTokens ?? true }).ids
  }

  decode (ids: readonly number[], options: DecodeOptions = {}): string {
    const kept = options.skipSpecialTokens ? ids.filter((id) => !this.specialTokenIds.has(id)) : ids
    // The library throws on an empty list; the empty sequence is simply the empty string.
    if (kept.length === 0) return ''
    return this.#inner.decode(kept as number[], { skip_special_tokens: false })
  }

  /** The vocabulary entry for an id (e.g. "▁Once", "<0xE6>", "<s>"), or undefined. */
  idToToken (id: number): string | undefined {
    return this.#inner.id_to_token(id)
  }

  tokenToId (token: string): number | undefined {
    return this.#inner.token_to_id(token)
  }
}

/** Loads `tokenizer.json` and `tokenizer_config.json` from a model directory. */
export async function loadTokenizer (modelDir: string): Promise<TextTokenizer> {
  const tokenizerPath = join(modelDir, 'tokenizer.json')
  const configPath = join(modelDir, 'tokenizer_config.json')
  const [json, config] = await Promise.all([readModelJson(tokenizerPath), readModelJson(configPath)])
  requireObject(config, configPath)
  return new TextTokenizer(json, config, tokenizerPath)
}
