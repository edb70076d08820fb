// Characters per token, measured per model for the tier limits' estimate: the
// R1 distill's Qwen tokenizer packs about four characters a token, stories260k's
// 512-token vocabulary about one, so one rule (four) for both would let a
// stories260k request reserve a quarter of what it uses.
import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import t from 'tap'
import { Tokenizer } from '@huggingface/tokenizers'
import { measureCharsPerToken } from '../../src/engine/chars-per-token.ts'
import { r1TokenizerFiles } from '../helpers/r1-tokenizer.ts'
import { STORIES_SOURCE } from '../helpers/models.ts'

t.test('the R1 distill\'s tokenizer: about four characters a token; stories260k\'s: about one', async t => {
  const r1 = r1TokenizerFiles()
  const qwen = new Tokenizer(r1.tokenizerJson, r1.config)
  const r1Ratio = measureCharsPerToken(text => qwen.encode(text).ids.length)
  t.ok(r1Ratio !== undefined && r1Ratio >= 3.2 && r1Ratio <= 5, `R1: ${r1Ratio}`)
  const read = (file: string) => JSON.parse(readFileSync(join(STORIES_SOURCE, file), 'utf8')) as Record<string, unknown>
  const stories = new Tokenizer(read('tokenizer.json'), read('tokenizer_config.json'))
  const storiesRatio = measureCharsPerToken(text => stories.encode(text).ids.length)
  t.ok(storiesRatio !== undefined && storiesRatio >= 0.5 && storiesRatio <= 2, `stories260k: ${storiesRatio}`)
  t.equal(measureCharsPerToken(() => 0), undefined, 'nothing measured: the default applies')
})
