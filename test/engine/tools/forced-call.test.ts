// A forced tool call (tool_choice required or a named tool): the constraint that writes it, token
// by token, in each family's form, and the text it writes parsing back to the call.
import t from 'tap'
import type { Constraint } from '../../../src/engine/onnx/grammar/grammar.ts'
import { ToolCallConstraint } from '../../../src/engine/onnx/grammar/tool-call-constraint.ts'
import type { GenerateEvent } from '../../../src/engine/backend.ts'
import { forcedCallTools } from '../../../src/engine/tools/forced-call.ts'
import { streamForcedCall } from '../../../src/engine/tools/forced-stream.ts'
import { TOOL_FORMATS } from '../../../src/engine/tools/format.ts'

t.test('each family\'s forced form, filled in, parses back to the call', async t => {
  for (const format of Object.values(TOOL_FORMATS)) {
    const args = '{"city":"Oslo","days":[1,2]}'
    const text = format.forced.open + 'get_weather' + format.forced.afterName + args + format.forced.close
    t.same(format.parse(text), [{ name: 'get_weather', arguments: args }], format.name)
  }
})

t.test('the tools a forced call may name', async t => {
  const tools = ['a', 'b'].map(name => ({ type: 'function' as const, function: { name } }))
  t.equal(forcedCallTools(tools, 'auto'), undefined)
  t.equal(forcedCallTools(tools, 'none'), undefined)
  t.equal(forcedCallTools(tools, undefined), undefined)
  t.same(forcedCallTools(tools, 'required')?.map(x => x.function.name), ['a', 'b'])
  t.same(forcedCallTools(tools, { type: 'function', function: { name: 'b' } })?.map(x => x.function.name), ['b'])
})

/** An arguments grammar over ids 10..19 that takes `length` tokens, then allows only the stop id. */
class CountingGrammar implements Constraint {
  taken: number[] = []
  disposed = false
  readonly #length: number
  #mask: number[] = []
  constructor (length: number) { this.#length = length }
  async prepare (): Promise<void> {
    this.#mask = this.taken.length < this.#length ? [10, 11, 12, 13, 14, 15, 16, 17, 18, 19] : [STOP]
  }

  apply (logits: Float32Array, n: number): void {
    for (let id = 0; id < n; id++) if (!this.#mask.includes(id)) logits[id] = -Infinity
  }

  accept (id: number): boolean {
    if (!this.#mask.includes(id)) return false
    this.taken.push(id)
    return true
  }

  dispose (): void { this.disposed = true }
}

const STOP = 0
const VOCAB = 40

/** Runs the constraint as the sequence does, picking the allowed id with the highest logit (`prefer` first). */
async function write (constraint: Constraint, prefer: number[]): Promise<number[]> {
  const out: number[] = []
  for (let step = 0; step < 100; step++) {
    await constraint.prepare()
    const logits = new Float32Array(VOCAB).map((_, id) => prefer.includes(id) ? 10 : -id / 100)
    constraint.apply(logits, VOCAB)
    let best = 0
    for (let id = 1; id < VOCAB; id++) if (logits[id] > logits[best]) best = id
    if (best === STOP) return out
    t.ok(constraint.accept(best), `token ${best} is taken`)
    out.push(best)
  }
  throw new Error('the call never ended')
}

t.test('the constraint writes the opening, one of the names, the chosen tool\'s arguments, the closing, then only the stop', async t => {
  const grammars: Record<string, CountingGrammar> = { a: new CountingGrammar(2), b: new CountingGrammar(3) }
  // Names: "a" is ids 30 31, "b" is 30 32 (a shared first token): the choice is made on the second.
  const make = (): ToolCallConstraint => new ToolCallConstraint({
    open: [1, 2, 3],
    names: [{ ids: [30, 31], arguments: () => grammars.a }, { ids: [30, 32], arguments: () => grammars.b }],
    close: [4, 5],
    stopIds: [STOP],
    vocab: VOCAB,
  })
  // The model would rather write anything else (39, the stop, the other name): the form wins.
  t.same(await write(make(), [39, 32, STOP]), [1, 2, 3, 30, 32, 10, 10, 10, 4, 5], 'b chosen, its 3 argument tokens')
  t.same(grammars.b.taken, [10, 10, 10])
  t.same(await write(make(), [31]), [1, 2, 3, 30, 31, 10, 10, 4, 5], 'a chosen')

  const constraint = make()
  await constraint.prepare()
  t.notOk(constraint.accept(2), 'a token out of the form is refused')
  t.ok(constraint.accept(1))
  constraint.dispose()
})

async function collectCall (pieces: string[], reason: 'stop' | 'length' | 'cancelled', format = TOOL_FORMATS.json) {
  async function * events (): AsyncGenerator<GenerateEvent> {
    yield { type: 'delta', reasoning: 'hm' }
    for (const content of pieces) yield { type: 'delta', content }
    yield { type: 'finish', reason, usage: { prompt_tokens: 1, completion_tokens: 1, total_tokens: 2 } }
  }
  const tools = [{ type: 'function' as const, function: { name: 'get' } }, { type: 'function' as const, function: { name: 'get_weather' } }]
  let name = ''
  let args = ''
  let content = ''
  let reasoning = ''
  let finish = ''
  let argPieces = 0
  for await (const event of streamForcedCall(events(), { format, tools })) {
    if (event.type === 'finish') { finish = event.reason; continue }
    content += event.content ?? ''
    reasoning += event.reasoning ?? ''
    for (const piece of event.toolCalls ?? []) {
      name += piece.name ?? ''
      args += piece.arguments ?? ''
      if (piece.arguments) argPieces++
    }
  }
  return { name, args, content, reasoning, finish, argPieces }
}

t.test('a forced call streams as written: any split of the answer gives the same call', async t => {
  for (const format of Object.values(TOOL_FORMATS)) {
    const args = '{"a": {"b": "}"}, "c": [1]}'
    const text = format.forced.open + 'get_weather' + format.forced.afterName + args + format.forced.close
    const whole = await collectCall([text], 'stop', format)
    t.same(whole, { name: 'get_weather', args, content: '', reasoning: 'hm', finish: 'tool_calls', argPieces: 1 }, `${format.name}: whole`)
    for (const size of [1, 2, 3, 7]) {
      const split = await collectCall(text.match(new RegExp(`[\\s\\S]{1,${size}}`, 'g')) ?? [], 'stop', format)
      t.same({ ...split, argPieces: 1 }, whole, `${format.name}: pieces of ${size}`)
      t.ok(split.argPieces > 1, 'the arguments come in pieces')
    }
  }
  const cut = await collectCall(['<tool_call>\n{"name": "get_weather", "arguments": {"a": 1'], 'length')
  t.same(cut, { name: 'get_weather', args: '{"a": 1', content: '', reasoning: 'hm', finish: 'length', argPieces: 1 }, 'cut by max_tokens: what was written, finish length')
  const early = await collectCall(['<tool_call>\n{"na'], 'length')
  t.same(early, { name: '', args: '', content: '<tool_call>\n{"na', reasoning: 'hm', finish: 'length', argPieces: 0 }, 'cut before the name: text')
})

t.test('a call cut by max_tokens once its arguments are whole is a call: finish tool_calls, the closing never in its arguments', async t => {
  for (const format of Object.values(TOOL_FORMATS)) {
    const head = format.forced.open + 'get_weather' + format.forced.afterName
    for (const args of ['{"city": "Yes,"}', '{"a": {"b": "}"}, "c": {}}']) {
      const { close } = format.forced
      // The whole closing written on the last allowed token; cut inside it; cut right after the arguments.
      for (const [label, text] of [['closed', head + args + close], ['inside the closing', head + args + close.slice(0, -2)], ['before the closing', head + args]]) {
        for (const size of [1, 5, 1000]) {
          const call = await collectCall(text.match(new RegExp(`[\\s\\S]{1,${size}}`, 'g')) ?? [], 'length', format)
          t.same(call, { name: 'get_weather', args, content: '', reasoning: 'hm', finish: 'tool_calls', argPieces: call.argPieces }, `${format.name}, ${args}, ${label}, pieces of ${size}`)
        }
      }
    }
    // Arguments still open when the tokens ran out: a cut call, as written.
    const open = await collectCall([head + '{"city": "Yes}'], 'length', format)
    t.same(open, { name: 'get_weather', args: '{"city": "Yes}', content: '', reasoning: 'hm', finish: 'length', argPieces: open.argPieces }, `${format.name}: inside a string, a brace is not the end`)
    const cancelled = await collectCall([head + '{"city": "Oslo"}' + format.forced.close], 'cancelled', format)
    t.equal(cancelled.finish, 'cancelled', `${format.name}: a cancelled reply stays cancelled`)
  }
})
