import t from 'tap'
import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import { IncrementalDetokenizer } from '../../../../src/engine/onnx/text/detokenizer.ts'
import { loadTokenizer, TextTokenizer } from '../../../../src/engine/onnx/text/tokenizer.ts'
import { createRng } from '../../../../src/engine/onnx/sampling/rng.ts'
import { STORIES_SOURCE } from '../../../helpers/models.ts'

/** Subtests have the same assertion methods as the root `t`. */
type TestContext = Pick<typeof t, 'equal' | 'fail'>

const MODEL_DIR = STORIES_SOURCE
const tok = await loadTokenizer(MODEL_DIR)
const goldens = JSON.parse(readFileSync(join(MODEL_DIR, 'goldens.json'), 'utf8')) as {
  cases: { prompt_ids: number[]; generated_ids: number[]; completion_text: string }[];
}

/** stories260k byte-fallback token for one byte. */
const byteToken = (b: number) => 3 + b

/** Streams ids through a detokenizer; returns the pieces (flush last). */
function stream (tokenizer: TextTokenizer, ids: number[], promptIds?: number[], skipSpecialTokens?: boolean) {
  const detok = new IncrementalDetokenizer(tokenizer, promptIds, { skipSpecialTokens })
  const pieces = ids.map((id) => detok.push(id))
  pieces.push(detok.flush())
  return pieces
}

/** Asserts the stream joins to the full decode and never shows a partial character. */
function checkStream (t: TestContext, tokenizer: TextTokenizer, ids: number[], label: string, skipSpecialTokens = true) {
  const pieces = stream(tokenizer, ids, undefined, skipSpecialTokens)
  const full = tokenizer.decode(ids, { skipSpecialTokens })
  const joined = pieces.join('')
  if (joined !== full) t.equal(joined, full, `${label}: stream joins to decode(all)`)
  if (!full.includes('\uFFFD')) {
    const bad = pieces.find((p) => p.includes('\uFFFD'))
    if (bad !== undefined) t.fail(`${label}: emitted a partial character ${JSON.stringify(bad)}`)
  }
  return joined === full
}

t.test('goldens: streamed text equals the decoded completion', async (t) => {
  for (const c of goldens.cases) {
    const withPrompt = stream(tok, c.generated_ids, c.prompt_ids).join('')
    t.equal(withPrompt, c.completion_text, 'with the prompt as context, the first token keeps its space')
    const full = tok.decode([...c.prompt_ids, ...c.generated_ids], { skipSpecialTokens: true })
    const prompt = tok.decode(c.prompt_ids, { skipSpecialTokens: true })
    t.equal(withPrompt, full.slice(prompt.length))
    t.ok(checkStream(t, tok, c.generated_ids, 'no prompt'), 'without a prompt it equals decode(generated)')
  }
})

t.test('"日本" as 7 byte tokens is held until each character is whole', async (t) => {
  // "▁" then the UTF-8 bytes of 日 (E6 97 A5) and 本 (E6 9C AC).
  const ids = [410, 233, 154, 168, 233, 159, 175]
  t.same(tok.encode('日本', { addSpecialTokens: false }), ids)
  const pieces = stream(tok, ids, tok.encode('Hello', { addSpecialTokens: true }))
  t.same(pieces, [' ', '', '', '日', '', '', '本', ''])
})

t.test('leading-space handling around SentencePiece pieces', async (t) => {
  const ids = tok.encode('Once  upon a  time', { addSpecialTokens: false })
  t.ok(checkStream(t, tok, ids, 'double spaces'))
  const pieces = stream(tok, [403, 407], [1])
  t.same(pieces, ['Once', ' upon', ''], 'BOS-only prompt: no leading space, like decode(prompt + gen)')
  t.same(stream(tok, [1, 403, 407, 2], undefined, false).join(''), '<s> Once upon</s>', 'specials kept when asked')
  t.same(stream(tok, [403, 1, 407, 2]).join(''), 'Once upon', 'specials skipped by default, spacing kept')
})

/** A random string of accents, CJK, emoji, ASCII words and spaces. */
function randomText (rng: () => number, length: number): string {
  const alphabet = ['é', 'ñ', 'ü', 'ç', '日', '本', '語', '中', '文', '😀', '👍🏽', '🚀', '€', '—', '“', 'Ω', 'Привет', ' ', ' ', 'the', 'dog', 'a', 'x', '\n', '!']
  let s = ''
  for (let i = 0; i < length; i++) s += alphabet[Math.floor(rng() * alphabet.length)]
  return s
}

t.test('random valid UTF-8 as byte tokens mixed with pieces', async (t) => {
  const rng = createRng(1234)
  let ok = 0
  const runs = 300
  for (let run = 0; run < runs; run++) {
    const text = randomText(() => rng.next(), 1 + Math.floor(rng.next() * 30))
    // Either the tokenizer's own encoding, or every UTF-8 byte as a byte token with some learned
    // pieces (ids 259..511) in between: both are sequences a model can emit.
    let ids: number[]
    if (run % 2 === 0) {
      ids = tok.encode(text, { addSpecialTokens: false })
    } else {
      ids = []
      for (const ch of text) {
        for (const b of Buffer.from(ch, 'utf8')) ids.push(byteToken(b))
        if (rng.next() < 0.3) ids.push(259 + Math.floor(rng.next() * 253))
      }
    }
    if (checkStream(t, tok, ids, `run ${run}`)) ok++
    // With a prompt too: compare against decode(prompt + ids) - decode(prompt).
    const prompt = tok.encode(randomText(() => rng.next(), 5), { addSpecialTokens: true })
    const expected = tok.decode([...prompt, ...ids], { skipSpecialTokens: true }).slice(tok.decode(prompt, { skipSpecialTokens: true }).length)
    const got = stream(tok, ids, prompt).join('')
    if (got !== expected) t.equal(got, expected, `run ${run} with prompt`)
  }
  t.equal(ok, runs, 'every random sequence streams exactly')
})

t.test('random ids over the whole vocabulary (including invalid bytes)', async (t) => {
  const rng = createRng(99)
  let ok = 0
  for (let run = 0; run < 200; run++) {
    const ids = Array.from({ length: 1 + Math.floor(rng.next() * 40) }, () => Math.floor(rng.next() * tok.vocabSize))
    if (checkStream(t, tok, ids, `run ${run}`)) ok++
  }
  t.equal(ok, 200)
})

// The GPT-2 byte-to-unicode table byte-level BPE vocabularies (Qwen's) are written in.
function byteLevelChars (): string[] {
  const printable: number[] = []
  for (let b = 0x21; b <= 0x7e; b++) printable.push(b)
  for (let b = 0xa1; b <= 0xac; b++) printable.push(b)
  for (let b = 0xae; b <= 0xff; b++) printable.push(b)
  const chars: string[] = []
  let extra = 0
  for (let b = 0; b < 256; b++) {
    chars.push(String.fromCodePoint(printable.includes(b) ? b : 256 + extra++))
  }
  return chars
}

t.test('byte-level BPE tokenizer (Qwen-style decoder)', async (t) => {
  const chars = byteLevelChars()
  const asToken = (s: string) => [...Buffer.from(s, 'utf8')].map((b) => chars[b]).join('')
  const vocab: Record<string, number> = {}
  chars.forEach((c, i) => (vocab[c] = i))
  // Multi-byte pieces, including ones that end mid-character (the first two bytes of 日).
  const pieces = [asToken(' the'), asToken(' dog'), asToken('é'), chars[0xe6] + chars[0x97], chars[0xa5] + asToken('!'), asToken('日本')]
  pieces.forEach((p, i) => (vocab[p] = 256 + i))
  const json = {
    version: '1.0',
    added_tokens: [
      { id: 262, content: '<|end|>', single_word: false, lstrip: false, rstrip: false, normalized: false, special: true },
      { id: 263, content: '<think>', single_word: false, lstrip: false, rstrip: false, normalized: false, special: false },
    ],
    normalizer: null,
    pre_tokenizer: { type: 'ByteLevel', add_prefix_space: false, trim_offsets: false, use_regex: true },
    post_processor: null,
    decoder: { type: 'ByteLevel', add_prefix_space: false, trim_offsets: false, use_regex: true },
    model: { type: 'BPE', vocab: { ...vocab, '<|end|>': 262, '<think>': 263 }, merges: [], byte_fallback: false, ignore_merges: false },
  }
  const bl = new TextTokenizer(json, { clean_up_tokenization_spaces: false })
  t.equal(bl.vocabSize, 264)
  t.equal(bl.decode([256, 257]), ' the dog')
  t.equal(bl.decode([259, 260]), '日!')

  t.same(stream(bl, [259, 260, 256]), ['', '日!', ' the', ''])
  t.same(stream(bl, [263, 256, 262, 257], [256]), ['<think>', ' the', '', ' dog', ''])

  const rng = createRng(7)
  let ok = 0
  for (let run = 0; run < 300; run++) {
    const ids: number[] = []
    for (const ch of randomText(() => rng.next(), 1 + Math.floor(rng.next() * 20))) {
      const r = rng.next()
      if (ch === '日' && r < 0.5) ids.push(259, r < 0.25 ? 260 : 0xa5)
      else if (r < 0.1) ids.push(256 + Math.floor(rng.next() * 3))
      else if (r < 0.15) ids.push(263)
      else for (const b of Buffer.from(ch, 'utf8')) ids.push(b)
    }
    if (checkStream(t, bl, ids, `byte-level run ${run}`)) ok++
  }
  t.equal(ok, 300)
})

t.test('cost per token stays bounded: only a short window is decoded', async (t) => {
  let longest = 0
  let calls = 0
  const counting = {
    specialTokenIds: tok.specialTokenIds,
    decode (ids: readonly number[], options?: { skipSpecialTokens?: boolean }) {
      calls++
      longest = Math.max(longest, ids.length)
      return tok.decode(ids, options)
    },
  }
  const ids: number[] = []
  for (let i = 0; i < 40; i++) ids.push(...goldens.cases[i % goldens.cases.length].generated_ids)
  const detok = new IncrementalDetokenizer(counting, goldens.cases[0].prompt_ids)
  let text = ''
  for (const id of ids) text += detok.push(id)
  text += detok.flush()
  t.equal(text, tok.decode([...goldens.cases[0].prompt_ids, ...ids], { skipSpecialTokens: true }).slice('Once upon a time'.length))
  t.ok(longest <= 16, `longest decoded window ${longest} tokens over ${ids.length} tokens`)
  t.ok(calls <= 2 * ids.length + 10, `${calls} decode calls for ${ids.length} tokens`)
})
