// The reasoning splitter on scripted text streams, cut into pieces at every
// possible position; the per-model reasoning modes applied to the events; and
// thinking stripped from earlier assistant turns.

import t from 'tap'
import type { GenerateEvent } from '../../src/engine/backend.ts'
import { ReasoningSplitter, stripThinking } from '../../src/engine/reasoning.ts'
import type { ReasoningMode } from '../../src/engine/models-file.ts'
import { withReasoningMode } from '../../src/engine/reasoning.ts'

type Run = ['content' | 'reasoning', string]

/** Feeds the pieces, then flushes; returns the released text as runs of one kind, in stream order. */
function runSplitter (pieces: string[], startsInReasoning: boolean): Run[] {
  const splitter = new ReasoningSplitter(startsInReasoning)
  const runs: Run[] = []
  const add = (kind: Run[0], text: string): void => {
    if (text === '') return
    const last = runs.at(-1)
    if (last && last[0] === kind) last[1] += text
    else runs.push([kind, text])
  }
  for (const result of [...pieces.map(p => splitter.push(p)), splitter.flush()]) {
    // One result: reasoning first, then content.
    add('reasoning', result.reasoning)
    add('content', result.content)
  }
  return runs
}

/** Every way to cut `text` into two and three pieces, and one character at a time. */
function cuts (text: string): string[][] {
  const out: string[][] = [[text], [...text]]
  for (let i = 0; i <= text.length; i++) {
    out.push([text.slice(0, i), text.slice(i)])
    for (let j = i; j <= text.length; j++) out.push([text.slice(0, i), text.slice(i, j), text.slice(j)])
  }
  return out
}

const CASES: Array<{ name: string; text: string; startsInReasoning: boolean; runs: Run[] }> = [
  {
    name: 'template opened the block: only the closing tag in the output',
    text: 'Two plus two.\n</think>\n\nIt is 4.',
    startsInReasoning: true,
    runs: [['reasoning', 'Two plus two.\n'], ['content', '\n\nIt is 4.']],
  },
  {
    name: 'the model opens the block itself',
    text: '<think>hmm</think>Answer',
    startsInReasoning: false,
    runs: [['reasoning', 'hmm'], ['content', 'Answer']],
  },
  {
    name: 'answer text before the model opens the block keeps its place',
    text: 'Sure. <think>hmm</think>Done',
    startsInReasoning: false,
    runs: [['content', 'Sure. '], ['reasoning', 'hmm'], ['content', 'Done']],
  },
  {
    name: 'never closed: all of it is reasoning, a partial tag included',
    text: 'thinking on and on </thi',
    startsInReasoning: true,
    runs: [['reasoning', 'thinking on and on </thi']],
  },
  {
    name: 'a model that never reasons is untouched, look-alike tags included',
    text: 'a < b, <th, <thinking> and </think> stay <think',
    startsInReasoning: false,
    runs: [['content', 'a < b, <th, <thinking> and </think> stay <think']],
  },
  {
    name: 'one block only: a <think> inside the answer is answer text',
    text: 'x</think>use <think> tags</think> like this',
    startsInReasoning: true,
    runs: [['reasoning', 'x'], ['content', 'use <think> tags</think> like this']],
  },
  {
    name: 'empty thinking',
    text: '<think></think>Hi',
    startsInReasoning: false,
    runs: [['content', 'Hi']],
  },
]

for (const c of CASES) {
  t.test(c.name, async t => {
    const all = cuts(c.text)
    let failures = 0
    for (const pieces of all) {
      const got = runSplitter(pieces, c.startsInReasoning)
      if (JSON.stringify(got) !== JSON.stringify(c.runs)) {
        failures++
        if (failures <= 3) t.same(got, c.runs, `pieces ${JSON.stringify(pieces)}`)
      }
    }
    t.equal(failures, 0, `the same result for all ${all.length} ways of cutting the text`)
  })
}

t.test('inReasoning follows the block; text is released as soon as it cannot be a tag', async t => {
  const s = new ReasoningSplitter(false)
  t.equal(s.inReasoning, false)
  t.same(s.push('Hello <'), { content: 'Hello ', reasoning: '' }, '"<" is held back')
  t.same(s.push('b'), { content: '<b', reasoning: '' }, 'and released once it is no tag')
  t.same(s.push('<think>ab</th'), { content: '', reasoning: 'ab' })
  t.equal(s.inReasoning, true)
  t.same(s.push('ink> ok'), { content: ' ok', reasoning: '' })
  t.equal(s.inReasoning, false)
  t.same(s.push('<'), { content: '<', reasoning: '' }, 'after the block nothing is held back')
  t.same(s.flush(), { content: '', reasoning: '' })
})

async function * events (...list: GenerateEvent[]): AsyncIterable<GenerateEvent> {
  yield * list
}

async function deltas (mode: ReasoningMode, list: GenerateEvent[]): Promise<Array<{ content?: string; reasoning?: string }>> {
  const out = []
  for await (const event of withReasoningMode(events(...list), mode)) {
    if (event.type === 'delta') out.push({ ...event, type: undefined })
    else out.push({ finish: event.reason })
  }
  return out.map(e => JSON.parse(JSON.stringify(e)))
}

const usage = { prompt_tokens: 1, completion_tokens: 1, total_tokens: 2 }
const R1_EVENTS: GenerateEvent[] = [
  { type: 'delta', reasoning: 'Two plus' },
  { type: 'delta', reasoning: ' two.\n' },
  { type: 'delta', content: '\n\n' },
  { type: 'delta', content: 'It is' },
  { type: 'delta', reasoning: '', content: ' 4.' },
  { type: 'finish', reason: 'stop', usage },
]

t.test('separate: thinking as reasoning, the answer without its leading blank lines', async t => {
  t.same(await deltas('separate', R1_EVENTS), [
    { reasoning: 'Two plus' }, { reasoning: ' two.\n' }, { content: 'It is' }, { content: ' 4.' }, { finish: 'stop' },
  ])
})

t.test('hidden: thinking dropped', async t => {
  t.same(await deltas('hidden', R1_EVENTS), [{ content: 'It is' }, { content: ' 4.' }, { finish: 'stop' }])
})

t.test('inline: the text as the model wrote it', async t => {
  t.same(await deltas('inline', R1_EVENTS), [
    { content: 'Two plus' }, { content: ' two.\n' }, { content: '</think>\n\n' }, { content: 'It is' }, { content: ' 4.' }, { finish: 'stop' },
  ])
  // A model that opened the block after some answer text gets its <think> back.
  t.same(await deltas('inline', [
    { type: 'delta', content: 'Sure. ' },
    { type: 'delta', reasoning: 'hmm' },
    { type: 'delta', reasoning: '!', content: 'Done' },
  ]), [{ content: 'Sure. ' }, { content: '<think>hmm' }, { content: '!</think>Done' }])
})

t.test('splitter + inline mode gives back the generated text, for every cut', async t => {
  const text = 'Two plus two.\n</think>\n\nIt is 4.'
  let bad = 0
  for (const pieces of cuts(text)) {
    const splitter = new ReasoningSplitter(true)
    const list: GenerateEvent[] = [...pieces.map(p => splitter.push(p)), splitter.flush()].map(r => ({ type: 'delta', ...r }))
    const out = (await deltas('inline', list)).map(d => d.content ?? '').join('')
    if (out !== text) bad++
  }
  t.equal(bad, 0)
})

t.test('a model that never closes the block: all reasoning, the finish reason kept', async t => {
  const list: GenerateEvent[] = [{ type: 'delta', reasoning: 'and so on' }, { type: 'finish', reason: 'length', usage }]
  t.same(await deltas('separate', list), [{ reasoning: 'and so on' }, { finish: 'length' }])
  t.same(await deltas('hidden', list), [{ finish: 'length' }])
})

t.test('stripThinking: earlier assistant turns lose their thinking', async t => {
  t.equal(stripThinking('<think>\nhmm\n</think>\n\nIt is 4.'), 'It is 4.', 'a whole block')
  t.equal(stripThinking('hmm\n</think>\n\nIt is 4.'), 'It is 4.', 'only the closing tag (template-opened block)')
  t.equal(stripThinking('<think>cut off while thinking'), '', 'an unclosed block is all thinking')
  t.equal(stripThinking('  Plain answer.  '), '  Plain answer.  ', 'a turn without thinking is untouched')
  t.equal(stripThinking('a</think>b</think>c'), 'c', 'what follows the last closing tag')
})
