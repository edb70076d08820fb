// The engine's side of structured output and logprobs: token bytes as the
// grammar and the logprobs see them, the log-softmax and its alternatives, a
// constrained row batched with an unconstrained one (each as alone), and an
// R1-style sequence whose thinking stays free while its answer is constrained,
// with the thinking budget closing the block.
import t from 'tap'
import type { GenerateRequest, ResponseFormat } from '../../../../src/engine/backend.ts'
import { LocalEngine } from '../../../../src/engine/onnx/scheduler/engine.ts'
import { applyTokenMask, Grammars } from '../../../../src/engine/onnx/grammar/grammar.ts'
import { GrammarService } from '../../../../src/engine/onnx/grammar/grammar-service.ts'
import { tokenLogprob } from '../../../../src/engine/onnx/sampling/logprobs.ts'
import { Sequence, type StepResult } from '../../../../src/engine/onnx/scheduler/sequence.ts'
import { TokenTable } from '../../../../src/engine/onnx/text/token-bytes.ts'
import { loadTokenizer, TextTokenizer } from '../../../../src/engine/onnx/text/tokenizer.ts'
import { storiesModelDir } from '../../../helpers/models.ts'
import { R1_TOKENS, r1TokenizerFiles } from '../../../helpers/r1-tokenizer.ts'
import { testDevice } from '../../../helpers/webgpu.ts'

const stories = await loadTokenizer(storiesModelDir())
const { tokenizerJson, config } = r1TokenizerFiles()
const r1 = new TextTokenizer(tokenizerJson, config)
const utf8 = (bytes: Uint8Array): string => Buffer.from(bytes).toString('utf8')

const SCHEMA = {
  type: 'object',
  properties: { animal: { type: 'string', enum: ['cat', 'dog'] }, legs: { type: 'integer', minimum: 0, maximum: 8 } },
  required: ['animal', 'legs'],
  additionalProperties: false,
}
const FORMAT: ResponseFormat = { type: 'json_schema', json_schema: { name: 'animal', schema: SCHEMA, strict: true } }

t.test('token bytes: SentencePiece with byte fallback, byte-level BPE, added and special tokens', async t => {
  const table = new TokenTable(stories)
  t.equal(utf8(table.bytes(stories.tokenToId('▁Once') as number)), ' Once', '"▁" is the space')
  t.same([...table.bytes(stories.tokenToId('<0x0A>') as number)], [10], 'a byte-fallback entry is its byte')
  t.same([...table.bytes(stories.tokenToId('<0xE6>') as number)], [0xe6])
  t.equal(table.text(stories.tokenToId('<0xE6>') as number), '\uFFFD', 'part of a character shows as U+FFFD; bytes has it exactly')
  const eos = stories.tokenToId('</s>') as number
  t.equal(utf8(table.bytes(eos)), '</s>', 'a special token is its content for logprobs')
  t.equal(table.grammarVocabulary()[eos].length, 0, 'and nothing for the grammar, which never writes it inside the text')

  const qwen = new TokenTable(r1)
  t.equal(utf8(qwen.bytes(r1.tokenToId('Ġthe') as number)), ' the', '"Ġ" is the space byte')
  t.equal(utf8(qwen.bytes(r1.tokenToId('ĊĊ') as number)), '\n\n')
  const think = r1.tokenToId('</think>') as number
  t.equal(utf8(qwen.bytes(think)), '</think>', 'an added token is its content')
  t.equal(utf8(qwen.grammarVocabulary()[think]), '</think>', 'a non-special added token is text to the grammar too')
  t.equal(qwen.grammarVocabulary()[R1_TOKENS.eos.id].length, 0)
  // Every entry of the byte-level vocabulary decodes as the tokenizer decodes it, for entries that are whole characters.
  for (const id of [0, 100, 1000, 20000, 100000, 150000]) {
    const text = r1.decode([id])
    if (!text.includes('\uFFFD')) t.equal(utf8(qwen.bytes(id)), text, `id ${id}`)
  }
})

t.test('log-softmax of what the sampler saw, the alternatives in order, masked tokens left out', async t => {
  const table = new TokenTable(stories)
  const logits = Float32Array.from([1, 3, 3, -Infinity, 2, 5, 9])
  const n = 5 // ids 5 and 6 are padding past the vocabulary
  const raw = [1, 3, 3, 2]
  const logSum = Math.log(raw.reduce((s, l) => s + Math.exp(l - 3), 0)) + 3
  const entry = tokenLogprob(logits, n, 0, 2, 3, table)
  t.equal(entry.token, table.text(2))
  t.ok(Math.abs(entry.logprob - (3 - logSum)) < 1e-12, 'temperature 0: the raw logits')
  t.same(entry.top_logprobs.map(alt => alt.token), [1, 2, 4].map(id => table.text(id)), 'most likely first, the lower id first among equals, padding never')
  t.equal(entry.top_logprobs[1].logprob, entry.logprob, 'a token\'s own logprob is its entry among the alternatives')
  const all = tokenLogprob(logits, n, 0, 0, 20, table)
  t.equal(all.top_logprobs.length, 4, 'a masked token is never an alternative')
  t.ok(Math.abs(all.top_logprobs.reduce((s, alt) => s + Math.exp(alt.logprob), 0) - 1) < 1e-12, 'the whole distribution sums to 1')
  const hot = tokenLogprob(logits, n, 0.5, 1, 1, table)
  const logSumHalf = Math.log(raw.reduce((s, l) => s + Math.exp((l - 3) * 2), 0))
  t.ok(Math.abs(hot.logprob - (0 - logSumHalf)) < 1e-12, 'temperature 0.5: the logits / 0.5')
})

t.test('a token mask: 1 bits allowed, the rest -Infinity, ids past the mask too', async t => {
  const logits = new Float32Array(70).fill(1)
  const mask = Int32Array.from([-1, 0b101])
  applyTokenMask(logits, 70, mask)
  t.ok(logits.slice(0, 32).every(l => l === 1), 'an all-ones word keeps its 32')
  t.same([...logits.slice(32, 36)], [1, -Infinity, 1, -Infinity])
  t.ok(logits.slice(36).every(l => l === -Infinity), 'the rest of the word and what the mask does not cover')
})

t.test('batched: a constrained and an unconstrained request decode together, each as alone', async t => {
  interface Outcome { text: string; reason: string; logprobs: number }
  const start = async () => {
    const texts = new Map<string, string>()
    const logprobs = new Map<string, number>()
    const done = new Map<string, (o: Outcome) => void>()
    const engine = await LocalEngine.load({ modelDir: storiesModelDir(), dtype: 'fp32', device: testDevice(), threads: 1, maxBatch: 4 }, {
      delta: (id, d) => {
        texts.set(id, (texts.get(id) ?? '') + d.content)
        logprobs.set(id, (logprobs.get(id) ?? 0) + (d.logprobs?.content.length ?? 0))
      },
      finish: (id, reason) => done.get(id)?.({ text: texts.get(id) ?? '', reason, logprobs: logprobs.get(id) ?? 0 }),
      error: (id, err) => { throw err },
    })
    const widths: number[] = []
    const forward = engine.session.forward.bind(engine.session)
    engine.session.forward = input => {
      widths.push(input.batch)
      return forward(input)
    }
    // The model's grammar workers, their port handed to this in-thread engine as the backend hands it to the engine's thread.
    const service = new GrammarService({ modelDir: storiesModelDir(), dtype: 'fp32' }, {}, port => engine.grammars.setPort(port))
    t.teardown(() => service.close())
    const run = (id: string, request: GenerateRequest): Promise<Outcome> => {
      const result = new Promise<Outcome>(resolve => done.set(id, resolve))
      engine.start(request, id)
      return result
    }
    return { engine, run, widths, service }
  }
  const base = { temperature: 0, topP: 1, topK: 0, stop: [] }
  const constrained: GenerateRequest = { ...base, messages: [{ role: 'user', content: 'Once upon a time' }], maxTokens: 60, responseFormat: FORMAT, logprobs: true, topLogprobs: 2 }
  const free: GenerateRequest = { ...base, messages: [{ role: 'user', content: 'The dog ran' }], maxTokens: 40 }

  const solo = await start()
  await solo.service.compile(FORMAT as Exclude<ResponseFormat, { type: 'text' }>, { scope: '' })
  const alone = [await solo.run('a', constrained), await solo.run('b', free)]
  await solo.engine.close()

  const shared = await start()
  await shared.service.compile(FORMAT as Exclude<ResponseFormat, { type: 'text' }>, { scope: '' })
  const together = await Promise.all([shared.run('a', constrained), shared.run('b', free)])
  t.same(together, alone, 'the same text, finish and logprob count as alone')
  t.ok(Math.max(...shared.widths) >= 2, 'they shared decode steps')
  t.equal(together[0].reason, 'stop')
  t.same(Object.keys(JSON.parse(together[0].text)).sort(), ['animal', 'legs'], `constrained: ${together[0].text}`)
  t.equal(together[1].logprobs, 0, 'the unconstrained row asked for no logprobs and got none')
  t.throws(() => JSON.parse(together[1].text), 'the unconstrained row is a story')
  await shared.engine.close()
})

t.test('R1-style: thinking is free text, the answer after </think> is constrained; the thinking budget closes the block', async t => {
  const tokens = new TokenTable(r1)
  const vocab = r1.vocabSize
  const eos = R1_TOKENS.eos.id
  const grammars = new Grammars(() => ({ bytes: tokens.grammarVocabulary(), vocabSize: vocab, stopIds: [eos] }))
  const json = FORMAT as Exclude<ResponseFormat, { type: 'text' }>
  await grammars.compile(json)
  const hello = r1.tokenToId('Hello') as number
  const close = r1.tokenToId('</think>') as number
  const open = r1.tokenToId('<think>') as number
  /** Logits that favour one token; everything else equal. */
  const favour = (id: number): Float32Array => {
    const logits = new Float32Array(vocab)
    logits[id] = 10
    return logits
  }
  const sequence = (request: Partial<GenerateRequest>, startsInReasoning: boolean) => new Sequence({
    id: 's',
    promptIds: r1.encode('<｜User｜>Hi<｜Assistant｜><think>\n', { addSpecialTokens: false }),
    maxNewTokens: 200,
    request: { messages: [], temperature: 0, topP: 1, topK: 0, stop: [], responseFormat: FORMAT, logprobs: true, topLogprobs: 1, ...request },
    tokenizer: r1,
    eosIds: [eos],
    validVocab: vocab,
    startsInReasoning,
    tokens,
    constraint: grammars.constraint(json),
    closeThinking: r1.encode('</think>', { addSpecialTokens: false }),
  })
  const step = async (seq: Sequence, id: number): Promise<StepResult> => {
    if (seq.constrained) await seq.prepare()
    return seq.advance(favour(id))
  }
  /** Runs the sequence on logits favouring `id` until it finishes; the answer and the logprob lists. */
  const finish = async (seq: Sequence, id: number) => {
    let content = ''
    let reasoning = ''
    const lists = { content: [] as string[], reasoning: [] as string[] }
    for (let k = 0; k < 200; k++) {
      const r = await step(seq, id)
      content += r.content
      reasoning += r.reasoning
      lists.content.push(...(r.logprobs?.content ?? []).map(e => e.token))
      lists.reasoning.push(...(r.logprobs?.reasoning ?? []).map(e => e.token))
      if (r.finish) return { content, reasoning, lists, finish: r.finish }
    }
    throw new Error('did not finish')
  }

  const free = sequence({}, true)
  let thinking = ''
  for (let k = 0; k < 3; k++) {
    t.notOk(free.constrained, 'no mask while thinking')
    thinking += (await step(free, hello)).reasoning
  }
  t.equal(thinking, 'HelloHelloHello', 'thinking writes what the model wants, JSON or not')
  await step(free, close)
  t.ok(free.constrained, 'after </think> the grammar applies')
  const rest = await finish(free, hello)
  t.equal(rest.finish, 'stop', 'the grammar ended the answer')
  t.same(Object.keys(JSON.parse(rest.content)).sort(), ['animal', 'legs'], `the answer is the schema's JSON though the logits wanted "Hello": ${rest.content}`)
  t.notMatch(rest.content, /Hello/)
  free.release()

  const budget = sequence({ thinkingBudget: 2 }, true)
  const run = await finish(budget, hello)
  t.equal(run.reasoning, 'HelloHello', 'two thinking tokens, then the budget closed the block')
  t.same(run.lists.reasoning, ['Hello', 'Hello', '</think>'], 'the thinking\'s logprobs, its closing tag included')
  t.same(Object.keys(JSON.parse(run.content)).sort(), ['animal', 'legs'], `then a constrained answer: ${run.content}`)
  t.equal(run.lists.content.join(''), run.content, 'the answer\'s logprobs spell it')
  budget.release()

  const direct = sequence({}, false)
  t.ok(direct.constrained, 'a prompt that opens no thinking block: constrained from the first token')
  const first = await step(direct, open)
  t.notOk(first.reasoning, '<think> cannot start a block (the grammar does not allow it)')
  const answer = await finish(direct, open)
  t.ok(JSON.parse(first.content + answer.content), 'JSON from the start')
  direct.release()
})

t.test('clear() lets every compiled grammar go; the instance compiles and constrains again', async t => {
  const tokens = new TokenTable(r1)
  const grammars = new Grammars(() => ({ bytes: tokens.grammarVocabulary(), vocabSize: r1.vocabSize, stopIds: [R1_TOKENS.eos.id] }))
  const json = FORMAT as Exclude<ResponseFormat, { type: 'text' }>
  await grammars.compile(json, 'a:animal')
  t.ok(grammars.has('a:animal'), 'compiled and kept')
  grammars.clear()
  t.notOk(grammars.has('a:animal'), 'nothing kept after clear(): the next use is a compile')
  const constraint = await grammars.constraint(json, 'b:animal')
  await constraint.prepare()
  const logits = new Float32Array(r1.vocabSize).fill(1)
  constraint.apply(logits, r1.vocabSize)
  t.equal(logits[r1.tokenToId('{') as number], 1, 'a new matcher still allows the JSON\'s opening brace')
  t.equal(logits[r1.tokenToId('Hello') as number], -Infinity, 'and masks the rest')
  constraint.dispose()
})
