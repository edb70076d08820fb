import t from 'tap'
import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import { loadTokenizer, TextTokenizer, specialTokenContent } from '../../../../src/engine/onnx/text/tokenizer.ts'
import { STORIES_SOURCE } from '../../../helpers/models.ts'

const MODEL_DIR = STORIES_SOURCE

interface Goldens {
  cases: [string, number[]][];
  edge: [string, number[]][];
}
const goldens = JSON.parse(readFileSync(join(MODEL_DIR, 'tokenizer_goldens.json'), 'utf8')) as Goldens

t.test('stories260k: encodes every golden like llama2.c', async (t) => {
  const tok = await loadTokenizer(MODEL_DIR)
  t.ok(goldens.cases.length > 300, 'golden file has its cases')
  let mismatches = 0
  for (const [text, ids] of goldens.cases) {
    const got = tok.encode(text, { addSpecialTokens: false })
    if (JSON.stringify(got) !== JSON.stringify(ids)) {
      mismatches++
      t.same(got, ids, `encode ${JSON.stringify(text)}`)
    }
    const back = tok.decode(got)
    if (back !== text) {
      mismatches++
      t.equal(back, text, `decode(encode(${JSON.stringify(text)}))`)
    }
  }
  t.equal(mismatches, 0, 'no encode or round-trip mismatches')
})

t.test('stories260k: the listed edge cases differ as documented', async (t) => {
  const tok = await loadTokenizer(MODEL_DIR)
  for (const [text, llama2cIds] of goldens.edge) {
    t.notSame(tok.encode(text, { addSpecialTokens: false }), llama2cIds, `edge ${JSON.stringify(text)} differs`)
  }
  // Literal special-token text is matched as the special token.
  t.same(tok.encode('<s>', { addSpecialTokens: false }), [1])
})

t.test('stories260k: special tokens, vocabulary and options', async (t) => {
  const tok = await loadTokenizer(MODEL_DIR)
  t.equal(tok.vocabSize, 512)
  t.equal(tok.bosToken, '<s>')
  t.equal(tok.eosToken, '</s>')
  t.same([...tok.specialTokenIds].sort((a, b) => a - b), [0, 1, 2])
  t.equal(tok.idToToken(1), '<s>')
  t.equal(tok.idToToken(403), '▁Once')
  t.equal(tok.idToToken(3), '<0x00>')
  t.equal(tok.tokenToId('</s>'), 2)

  t.same(tok.encode('Once upon a time'), [1, 403, 407, 261, 378], 'default encode adds BOS')
  t.same(tok.encode('Once upon a time', { addSpecialTokens: false }), [403, 407, 261, 378])
  t.equal(tok.decode([1, 403, 407]), '<s> Once upon')
  t.equal(tok.decode([1, 403, 407], { skipSpecialTokens: true }), 'Once upon')
  t.equal(tok.decode([]), '', 'empty decode is the empty string, not a throw')
  t.equal(tok.decode([1, 2], { skipSpecialTokens: true }), '')
})

t.test('object-form special tokens and additional_special_tokens', async (t) => {
  const json = JSON.parse(readFileSync(join(MODEL_DIR, 'tokenizer.json'), 'utf8'))
  const tok = new TextTokenizer(json, {
    bos_token: { __type: 'AddedToken', content: '<s>', lstrip: false },
    eos_token: { content: '</s>' },
    additional_special_tokens: ['▁Once'],
  })
  t.equal(tok.bosToken, '<s>')
  t.equal(tok.eosToken, '</s>')
  t.ok(tok.specialTokenIds.has(403), 'additional special token is special')
  t.equal(tok.decode([403, 407], { skipSpecialTokens: true }), 'upon')
  t.equal(specialTokenContent(null), null)
  t.equal(specialTokenContent(undefined), null)
})

t.test('errors name the file and the problem', async (t) => {
  const dir = t.testdir({
    'bad-json': { 'tokenizer.json': '{ not json', 'tokenizer_config.json': '{}' },
    'no-config': { 'tokenizer.json': readFileSync(join(MODEL_DIR, 'tokenizer.json'), 'utf8') },
    'not-object': { 'tokenizer.json': readFileSync(join(MODEL_DIR, 'tokenizer.json'), 'utf8'), 'tokenizer_config.json': '[1]' },
  })
  await t.rejects(loadTokenizer(join(dir, 'missing')), /tokenizer(_config)?\.json: file not found/)
  await t.rejects(loadTokenizer(join(dir, 'bad-json')), /bad-json\/tokenizer\.json: invalid JSON/)
  await t.rejects(loadTokenizer(join(dir, 'no-config')), /no-config\/tokenizer_config\.json: file not found/)
  await t.rejects(loadTokenizer(join(dir, 'not-object')), /tokenizer_config\.json: expected a JSON object/)
})
