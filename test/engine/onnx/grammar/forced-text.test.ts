// A forced tool call's fixed text: its ids write exactly that text (a SentencePiece tokenizer
// encoding it alone would start it with a space), and never use a special token, which the
// reply's text leaves out.
import t from 'tap'
import { ForcedText } from '../../../../src/engine/onnx/grammar/forced-text.ts'
import { TokenTable } from '../../../../src/engine/onnx/text/token-bytes.ts'
import { loadTokenizer } from '../../../../src/engine/onnx/text/tokenizer.ts'
import { TOOL_FORMATS } from '../../../../src/engine/tools/format.ts'
import { storiesModelDir } from '../../../helpers/models.ts'

t.test('the ids of each fixed text decode to exactly that text (stories260k)', async t => {
  const tokenizer = await loadTokenizer(storiesModelDir())
  const forced = new ForcedText(new TokenTable(tokenizer), tokenizer.vocabSize, tokenizer.specialTokenIds)
  const { open, afterName, close } = TOOL_FORMATS.json.forced
  // As the reply's text has them: after the prompt's tokens.
  const before = tokenizer.encode('Once upon a time', { addSpecialTokens: false })
  const after = (ids: number[]): string => tokenizer.decode([...before, ...ids]).slice(tokenizer.decode(before).length)
  for (const text of [open, 'get_weather' + afterName, close, 'Ünïcode ✓']) {
    const ids = forced.ids(text)
    t.equal(after(ids), text, JSON.stringify(text))
    t.notOk(ids.some(id => tokenizer.specialTokenIds.has(id)), 'no special token')
  }
  t.not(after(tokenizer.encode(open, { addSpecialTokens: false })), open, 'the tokenizer alone would not write it exactly (why this exists)')
})
