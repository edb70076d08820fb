// A call the model writes in its family's form becomes tool calls; anything else stays text.
import fc from 'fast-check'
import t from 'tap'
import type { GenerateEvent, ToolDefinition } from '../../../src/engine/backend.ts'
import { parseToolCalls } from '../../../src/engine/tools/call-parser.ts'
import { TOOL_FORMATS, toolInstructions } from '../../../src/engine/tools/format.ts'

const tools: ToolDefinition[] = [{ type: 'function', function: { name: 'get_weather', parameters: { type: 'object', properties: { city: { type: 'string' } } } } }]
const usage = { prompt_tokens: 1, completion_tokens: 2, total_tokens: 3 }
const R1_CALL = '<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n{"city": "Oslo"}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>'

async function run (pieces: string[], opts: { format?: 'r1' | 'json'; reason?: 'stop' | 'length'; parallel?: boolean } = {}): Promise<GenerateEvent[]> {
  async function * events (): AsyncGenerator<GenerateEvent> {
    yield { type: 'delta', reasoning: 'thinking <｜tool▁calls▁begin｜> about it' }
    for (const content of pieces) yield { type: 'delta', content }
    yield { type: 'finish', reason: opts.reason ?? 'stop', usage }
  }
  const out: GenerateEvent[] = []
  for await (const e of parseToolCalls(events(), { format: TOOL_FORMATS[opts.format ?? 'r1'], tools, parallel: opts.parallel ?? true })) out.push(e)
  return out
}

const text = (events: GenerateEvent[]) => events.map(e => e.type === 'delta' ? e.content ?? '' : '').join('')
const calls = (events: GenerateEvent[]) => events.flatMap(e => e.type === 'delta' ? e.toolCalls ?? [] : [])
const finish = (events: GenerateEvent[]) => events.at(-1)

t.test('R1: a call split across deltas becomes one tool call: the name first, then the arguments', async t => {
  const pieces = ['Sure. ', ...R1_CALL.match(/[\s\S]{1,3}/g)!]
  const out = await run(pieces)
  t.equal(text(out), 'Sure. ', 'the text before the call stays text')
  const [first, second] = calls(out)
  t.match(first, { index: 0, name: 'get_weather', arguments: '' })
  t.match(first.id, /^call_/)
  t.same(second, { index: 0, arguments: '{"city":"Oslo"}' })
  t.match(finish(out), { type: 'finish', reason: 'tool_calls', usage })
  t.equal(out[0].type === 'delta' && out[0].reasoning, 'thinking <｜tool▁calls▁begin｜> about it', 'thinking is never parsed')
})

t.test('two calls; parallel_tool_calls false keeps the first only', async t => {
  const two = R1_CALL.replace('<｜tool▁calls▁end｜>', '\n<｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n{"city":"Bergen"}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>')
  t.same(calls(await run([two])).filter(c => c.arguments).map(c => [c.index, c.arguments]), [[0, '{"city":"Oslo"}'], [1, '{"city":"Bergen"}']])
  t.same(calls(await run([two], { parallel: false })).filter(c => c.arguments).map(c => c.arguments), ['{"city":"Oslo"}'])
})

t.test('not well-formed, an undeclared tool, or cut off by max_tokens: the text stays text', async t => {
  for (const [name, pieces, reason] of [
    ['arguments not JSON', [R1_CALL.replace('{"city": "Oslo"}', '{city: Oslo}')], 'stop'],
    ['arguments not an object', [R1_CALL.replace('{"city": "Oslo"}', '[1]')], 'stop'],
    ['an undeclared tool', [R1_CALL.replace('get_weather', 'rm_rf')], 'stop'],
    ['text after the call', [R1_CALL + ' and more'], 'stop'],
    ['cut off', [R1_CALL.slice(0, 60)], 'length'],
  ] as const) {
    const out = await run(['A: ', ...pieces], { reason })
    t.equal(text(out), 'A: ' + pieces.join(''), `${name}: all the text comes out`)
    t.same(calls(out), [], `${name}: no call`)
    t.match(finish(out), { reason }, `${name}: finish kept`)
  }
})

t.test('a held-back start that never becomes a call is released', async t => {
  const out = await run(['Look: <｜tool', '▁x'])
  t.equal(text(out), 'Look: <｜tool▁x')
  t.match(finish(out), { reason: 'stop' })
})

t.test('the generic form: <tool_call> JSON', async t => {
  const out = await run(['<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n</tool_call>'], { format: 'json' })
  t.same(calls(out).map(c => c.name ?? c.arguments), ['get_weather', '{"city":"Oslo"}'])
  t.match(finish(out), { reason: 'tool_calls' })
})

t.test('the tools block lists each tool and shows the exact call form', async t => {
  const block = toolInstructions(TOOL_FORMATS.r1, tools, true)
  t.ok(block.includes('{"name":"get_weather","parameters":{"type":"object","properties":{"city":{"type":"string"}}}}'))
  t.ok(block.includes('<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>TOOL_NAME\n```json\n{"ARGUMENT": "VALUE"}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>'))
  t.ok(toolInstructions(TOOL_FORMATS.json, tools, false).includes('Call at most one tool per answer.'))
  // What the block says is what the parser takes.
  t.same(TOOL_FORMATS.r1.parse(TOOL_FORMATS.r1.calls([{ name: 'get_weather', arguments: '{"a":1}' }])), [{ name: 'get_weather', arguments: '{"a":1}' }])
  t.same(TOOL_FORMATS.json.parse(TOOL_FORMATS.json.calls([{ name: 'get_weather', arguments: '{"a":1}' }])), [{ name: 'get_weather', arguments: '{"a":1}' }])
})

t.test('property: however the answer is split into deltas, the text and calls are those of the unsplit answer', async t => {
  const answers = [
    'Sure. ' + R1_CALL,
    'No call here, just <｜tool▁ text.',
    'Two: ' + R1_CALL.replace('<｜tool▁calls▁end｜>', '\n<｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n{"city":"Bergen"}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>'),
    R1_CALL + ' trailing',
  ]
  const summary = (events: GenerateEvent[]) => ({
    text: text(events),
    calls: calls(events).map(c => ({ ...c, id: c.id === undefined ? undefined : 'id' })),
    finish: finish(events)?.type === 'finish' ? (finish(events) as { reason: string }).reason : undefined,
  })
  for (const answer of answers) {
    const whole = summary(await run([answer]))
    await fc.assert(fc.asyncProperty(fc.array(fc.integer({ min: 1, max: answer.length - 1 }), { maxLength: 12 }), async cuts => {
      const points = [...new Set(cuts)].sort((a, b) => a - b)
      const pieces = [0, ...points].map((start, i) => answer.slice(start, points[i] ?? answer.length))
      t.same(summary(await run(pieces)), whole)
    }), { numRuns: 50 })
  }
})
