// A prompt that cannot fit the context is refused before the costly part of
// tokenizing it: the BPE bound (a piece of n characters needs at least
// n / longest-token tokens) stops encoding once the prompt is shown to need
// more than the limit. The bound must be a true lower bound: whenever the
// encoder stops early, the full encoding is at least that long.
import t from 'tap'
import fc from 'fast-check'
import { encodeChatPrompt } from '../../../../src/engine/onnx/text/chat-prompt.ts'
import { ChatTemplate } from '../../../../src/engine/onnx/text/chat-template.ts'
import { LocalEngine } from '../../../../src/engine/onnx/scheduler/engine.ts'
import { PromptTooLong } from '../../../../src/engine/onnx/text/quoted-encoding.ts'
import { loadTokenizer, TextTokenizer } from '../../../../src/engine/onnx/text/tokenizer.ts'
import { ApiError } from '../../../../src/errors.ts'
import { randomModelDir, storiesModelDir } from '../../../helpers/models.ts'
import { r1TokenizerFiles } from '../../../helpers/r1-tokenizer.ts'
import { testDevice } from '../../../helpers/webgpu.ts'

const { tokenizerJson, config } = r1TokenizerFiles()
const tokenizers: Array<[string, TextTokenizer]> = [
  ['stories260k', await loadTokenizer(storiesModelDir())],
  ['R1-style Qwen BPE', new TextTokenizer(tokenizerJson, config)],
  ['byte tokenizer', await loadTokenizer(randomModelDir('llama'))],
]

const piece = fc.constantFrom('a', ' ', 'Once upon a time. ', '日本語', '😀', '\uD800', '</s>', '<｜User｜>', '\n', 'xyz')
const text = fc.array(fc.tuple(piece, fc.integer({ min: 1, max: 400 })), { minLength: 1, maxLength: 4 }).map(runs => runs.map(([p, n]) => p.repeat(n)).join(''))

for (const [name, tok] of tokenizers) {
  t.test(`${name}: an early stop is always right`, async t => {
    const template = ChatTemplate.fromTokenizerConfig(tok.config)
    let early = 0
    fc.assert(fc.property(text, fc.integer({ min: 1, max: 3000 }), (content, limit) => {
      const messages = [{ role: 'user' as const, content }]
      const full = encodeChatPrompt(template, tok, messages).ids
      try {
        const ids = encodeChatPrompt(template, tok, messages, limit).ids
        return ids.length <= limit && JSON.stringify(ids) === JSON.stringify(full)
      } catch (err) {
        if (!(err instanceof PromptTooLong)) throw err
        early++
        return err.atLeast > limit && full.length >= err.atLeast
      }
    }), { seed: 11, numRuns: 150 })
    t.comment(`${early} of 150 stopped early`)
    t.ok(early > 0, 'the limit was reached in some cases')
  })
}

t.test('stories260k engine: a megabyte prompt is refused in well under the seconds it takes to tokenize', async t => {
  const engine = await LocalEngine.load({ modelDir: storiesModelDir(), dtype: 'fp32', device: testDevice(), threads: 1 }, { delta () {}, finish () {}, error () {} })
  t.teardown(() => engine.close())
  const content = 'Once upon a time '.repeat(15420) // 262,140 characters, four times: ~14 s to tokenize in full
  const started = performance.now()
  const refusal = (() => {
    try {
      engine.start({ messages: Array.from({ length: 4 }, () => ({ role: 'user' as const, content })), temperature: 0, topP: 1, topK: 0, stop: [] })
    } catch (err) {
      return err
    }
  })()
  const ms = performance.now() - started
  t.ok(refusal instanceof ApiError, 'refused')
  t.match(refusal, { code: 'context_length_exceeded', param: 'messages', message: /context length is 512 tokens; the prompt has at least \d+\./ })
  t.ok(ms < 3000, `refused in ${Math.round(ms)} ms`)
  t.equal(engine.activeCount, 0)
})
