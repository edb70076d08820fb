// A small byte-level BPE tokenizer (256 byte tokens, no merges, a few special
// tokens and a chat template) for random models built without a tokenizer
// directory. Any text round-trips through it exactly.

export const BYTE_TOKENIZER_SPECIALS = ['<|bos|>', '<|eos|>', '<|system|>', '<|user|>', '<|assistant|>'] as const

/** GPT-2's reversible map from bytes to printable characters, as ByteLevel uses. */
function byteToUnicode (): string[] {
  const printable: number[] = []
  for (let b = 0x21; b <= 0x7e; b++) printable.push(b)
  for (let b = 0xa1; b <= 0xac; b++) printable.push(b)
  for (let b = 0xae; b <= 0xff; b++) printable.push(b)
  const map: string[] = new Array(256)
  let extra = 0
  for (let b = 0; b < 256; b++) {
    map[b] = printable.includes(b) ? String.fromCodePoint(b) : String.fromCodePoint(256 + extra++)
  }
  return map
}

export interface TokenizerFiles {
  'tokenizer.json': unknown
  'tokenizer_config.json': unknown
  'special_tokens_map.json': unknown
}

export function byteTokenizerFiles (): TokenizerFiles {
  const vocab: Record<string, number> = {}
  byteToUnicode().forEach((ch, id) => { vocab[ch] = id })
  const added = BYTE_TOKENIZER_SPECIALS.map((content, k) => ({
    id: 256 + k, content, single_word: false, lstrip: false, rstrip: false, normalized: false, special: true,
  }))
  const tokenizer = {
    version: '1.0',
    truncation: null,
    padding: null,
    added_tokens: added,
    normalizer: null,
    pre_tokenizer: { type: 'ByteLevel', add_prefix_space: false, trim_offsets: true, use_regex: true },
    post_processor: null,
    decoder: { type: 'ByteLevel', add_prefix_space: true, trim_offsets: true, use_regex: true },
    model: {
      type: 'BPE',
      dropout: null,
      unk_token: null,
      continuing_subword_prefix: null,
      end_of_word_suffix: null,
      fuse_unk: false,
      byte_fallback: false,
      ignore_merges: false,
      vocab,
      merges: [],
    },
  }
  const addedTokensDecoder: Record<string, unknown> = {}
  for (const t of added) {
    addedTokensDecoder[String(t.id)] = { content: t.content, lstrip: false, normalized: false, rstrip: false, single_word: false, special: true }
  }
  const config = {
    tokenizer_class: 'PreTrainedTokenizerFast',
    bos_token: '<|bos|>',
    eos_token: '<|eos|>',
    pad_token: null,
    add_bos_token: false,
    clean_up_tokenization_spaces: false,
    model_max_length: 1 << 30,
    added_tokens_decoder: addedTokensDecoder,
    chat_template: "{{- bos_token -}}{%- for message in messages -%}{{- '<|' + message['role'] + '|>' + message['content'] + '<|eos|>' -}}{%- endfor -%}{%- if add_generation_prompt -%}{{- '<|assistant|>' -}}{%- endif -%}",
  }
  return {
    'tokenizer.json': tokenizer,
    'tokenizer_config.json': config,
    'special_tokens_map.json': { bos_token: '<|bos|>', eos_token: '<|eos|>' },
  }
}

/** Token ids of the generated tokenizer's specials. */
export const BYTE_TOKENIZER_BOS_ID = 256
export const BYTE_TOKENIZER_EOS_ID = 257
export const BYTE_TOKENIZER_SIZE = 256 + BYTE_TOKENIZER_SPECIALS.length
