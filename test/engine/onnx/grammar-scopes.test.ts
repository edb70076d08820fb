// One account's new schema compiles in that account's own serving grammar
// worker: while account B's slow schema compiles where it will serve, account
// A's constrained generation (its schema compiled already) gets its masks and
// finishes. Serving workers are bounded: a new scope retires the least recently
// used worker that holds no matcher, and is refused with 503 when none can go.
import { once } from 'node:events'
import t, { type Test } from 'tap'
import type { GenerateRequest } from '../../../src/engine/backend.ts'
import { LocalEngine } from '../../../src/engine/onnx/engine.ts'
import type { JsonFormat } from '../../../src/engine/onnx/grammar.ts'
import { GrammarService } from '../../../src/engine/onnx/grammar-service.ts'
import { NESTED_PATTERN } from '../../helpers/hostile-schemas.ts'
import { storiesModelDir } from '../../helpers/models.ts'

const MODEL = { modelDir: storiesModelDir(), dtype: 'fp32' as const }
const format = (schema: Record<string, unknown>): JsonFormat => ({ type: 'json_schema', json_schema: { name: 'x', schema, strict: true } })
const ANIMAL = { type: 'object', properties: { animal: { type: 'string', enum: ['cat', 'dog'] } }, required: ['animal'], additionalProperties: false }

async function engineWith (t: Test) {
  const events: string[] = []
  const done = new Map<string, (reason: string) => void>()
  const failed = new Map<string, (err: Error) => void>()
  const engine = await LocalEngine.load({ modelDir: MODEL.modelDir, dtype: 'fp32', device: 'cpu', threads: 1 }, {
    delta: id => { events.push(`${id}:delta`) },
    finish: (id, reason) => done.get(id)?.(reason),
    error: (id, err) => failed.get(id)?.(err),
  })
  t.teardown(() => engine.close())
  const run = (id: string, scope: string, schema: Record<string, unknown>): Promise<string> => {
    const request: GenerateRequest = { messages: [{ role: 'user', content: 'Once upon a time' }], temperature: 0, topP: 1, topK: 0, stop: [], maxTokens: 40, responseFormat: format(schema), grammarScope: scope }
    const result = new Promise<string>((resolve, reject) => {
      done.set(id, resolve)
      failed.set(id, reject)
    })
    engine.start(request, id)
    return result
  }
  return { engine, events, run }
}

t.test('a slow compile for account B does not hold up account A\'s constrained generation', async t => {
  const { engine, events, run } = await engineWith(t)
  const service = new GrammarService(MODEL, { compileTimeoutMs: 120_000 }, (port, scope) => engine.grammars.setPort(port, scope))
  t.teardown(() => service.close())
  await service.compile(format(ANIMAL), { scope: 'a' })
  t.equal(await run('warm', 'a', ANIMAL), 'stop', 'A\'s schema serves')

  const serving = once(service, 'serving')
  const slow = service.compile(format(NESTED_PATTERN), { scope: 'b' }).then(() => { events.push('b:compiled') })
  const [started] = await serving as [{ scope: string }]
  t.equal(started.scope, 'b', 'B\'s schema passed its trial and compiles where it will serve')
  events.length = 0
  const finished = run('a1', 'a', ANIMAL).then(reason => { events.push(`a1:${reason}`) })
  await Promise.race([finished, slow])
  await Promise.all([finished, slow])
  const end = events.indexOf('a1:stop')
  t.ok(end >= 0, 'A\'s reply ended by its grammar')
  t.ok(events.slice(0, end).includes('a1:delta'), 'with its tokens')
  t.ok(end < events.indexOf('b:compiled'), `A finished while B's schema was still compiling (${events.join(' ')})`)
})
