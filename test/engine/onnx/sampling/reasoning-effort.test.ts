// reasoning_effort on an R1-style sequence (its prompt opens <think>): none closes thinking at
// once, low/medium/high cap it at their budgets within max_tokens and the answer follows; the
// usage's reasoning_tokens counts exactly the tokens generated inside thinking.
import t from 'tap'
import type { GenerateRequest } from '../../../../src/engine/backend.ts'
import { effortBudget } from '../../../../src/engine/onnx/sampling/reasoning-effort.ts'
import { Sequence } from '../../../../src/engine/onnx/scheduler/sequence.ts'
import { TextTokenizer } from '../../../../src/engine/onnx/text/tokenizer.ts'
import { R1_TOKENS, r1TokenizerFiles } from '../../../helpers/r1-tokenizer.ts'

const { tokenizerJson, config } = r1TokenizerFiles()
const r1 = new TextTokenizer(tokenizerJson, config)
const hello = r1.tokenToId('Hello') as number
const close = r1.encode('</think>', { addSpecialTokens: false })

function run (request: Partial<GenerateRequest>, maxNewTokens: number) {
  const seq = new Sequence({
    id: 's',
    promptIds: r1.encode('<｜User｜>Hi<｜Assistant｜><think>\n', { addSpecialTokens: false }),
    maxNewTokens,
    request: { messages: [], temperature: 0, topP: 1, topK: 0, stop: [], ...request },
    tokenizer: r1,
    eosIds: [R1_TOKENS.eos.id],
    validVocab: r1.vocabSize,
    startsInReasoning: true,
    closeThinking: close,
    effortBudget: effortBudget(request.reasoningEffort, maxNewTokens),
  })
  let reasoning = ''
  let content = ''
  // The model wants to say Hello for ever, thinking or not.
  for (;;) {
    const logits = new Float32Array(r1.vocabSize)
    logits[hello] = 10
    const step = seq.advance(logits)
    reasoning += step.reasoning
    content += step.content
    if (step.finish) return { reasoning, content, reasoningTokens: seq.reasoningTokens, generated: seq.generated }
  }
}

t.test('the budgets: none/minimal 0; low, medium, high a quarter, half, three quarters of max_tokens up to their ceilings', async t => {
  t.equal(effortBudget(undefined, 100), undefined)
  t.equal(effortBudget('none', 100), 0)
  t.equal(effortBudget('minimal', 100), 0)
  t.equal(effortBudget('low', 100), 25)
  t.equal(effortBudget('medium', 100), 50)
  t.equal(effortBudget('high', 100), 75)
  t.equal(effortBudget('high', 100000), 16384)
  t.equal(effortBudget('low', 2), 1, 'at least one token')
})

t.test('none closes thinking at once: no reasoning, all tokens answer but the closing tag', async t => {
  const r = run({ reasoningEffort: 'none' }, 12)
  t.equal(r.reasoning, '')
  t.equal(r.content, 'Hello'.repeat(12 - close.length))
  t.equal(r.reasoningTokens, close.length, 'only the forced </think> is thinking')
})

t.test('low thinks for its budget, then answers in the rest', async t => {
  const r = run({ reasoningEffort: 'low' }, 40)
  t.equal(r.reasoning, 'Hello'.repeat(10), 'a quarter of 40')
  t.equal(r.content, 'Hello'.repeat(40 - 10 - close.length))
  t.equal(r.reasoningTokens, 10 + close.length, 'exact: the thinking and its closing tag')
  t.equal(r.generated, 40)
})

t.test('without an effort the model thinks as long as it likes, and every token counts as reasoning', async t => {
  const r = run({}, 20)
  t.equal(r.content, '')
  t.equal(r.reasoningTokens, 20)
})
