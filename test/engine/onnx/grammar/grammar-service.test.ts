// The grammar service on its own, over stories260k's vocabulary: a compile
// past the time limit is a 400 naming the limit (its worker terminated); an
// aborted signal stops a compile; compiles in flight are bounded per scope and
// in all; a compile past the memory bound is stopped; a serving worker past its memory bound is replaced once idle, and a
// constrained generation goes on through the new one.
import t from 'tap'
import { ApiError } from '../../../../src/errors.ts'
import type { GenerateRequest } from '../../../../src/engine/backend.ts'
import { LocalEngine } from '../../../../src/engine/onnx/scheduler/engine.ts'
import type { JsonFormat } from '../../../../src/engine/onnx/grammar/grammar.ts'
import { CompileCancelled, GrammarService } from '../../../../src/engine/onnx/grammar/grammar-service.ts'
import { NESTED_PATTERN } from '../../../helpers/hostile-schemas.ts'
import { storiesModelDir } from '../../../helpers/models.ts'
import { testDevice } from '../../../helpers/webgpu.ts'

const MODEL = { modelDir: storiesModelDir(), dtype: 'fp32' as const }
const format = (schema: Record<string, unknown>): JsonFormat => ({ type: 'json_schema', json_schema: { name: 'x', schema, strict: true } })
const ANIMAL = { type: 'object', properties: { animal: { type: 'string', enum: ['cat', 'dog'] } }, required: ['animal'], additionalProperties: false }

t.test('past the time limit: 400 naming response_format and the limit', async t => {
  const service = new GrammarService(MODEL, { compileTimeoutMs: 300 }, () => {})
  t.teardown(() => service.close())
  const err = await service.compile(format(NESTED_PATTERN), { scope: 'a' }).catch((e: unknown) => e)
  t.ok(err instanceof ApiError)
  t.match(err, { code: 'invalid_parameter', param: 'response_format', message: /300 ms/ })
  t.match(service.counts, { compiles: 1, timedOut: 1, inFlight: 0 })
  await service.compile(format(ANIMAL), { scope: 'a' })
  t.pass('the next schema compiles')
})

t.test('past the memory bound while compiling: 400 naming response_format and the bound', async t => {
  // The vocabulary's instance holds about 40 MiB; this long enum grows it past 80 MiB as it compiles.
  const service = new GrammarService(MODEL, { compileTimeoutMs: 120_000, memoryBytes: 80 * 2 ** 20 }, () => {})
  t.teardown(() => service.close())
  const big = { type: 'string', enum: Array.from({ length: 20_000 }, (_, i) => `value number ${i} of the enum`) }
  const err = await service.compile(format(big), { scope: 'a' }).catch((e: unknown) => e)
  t.match(err, { code: 'invalid_parameter', param: 'response_format', message: /80 MiB.*GRAMMAR_WORKER_MEMORY_MB/ })
  t.match(service.counts, { failed: 1, timedOut: 0, inFlight: 0 })
})

t.test('an aborted signal stops the compile; the slots are bounded per scope and in all', async t => {
  const service = new GrammarService(MODEL, { compileTimeoutMs: 60_000, perScope: 1, total: 2 }, () => {})
  t.teardown(() => service.close())
  const first = new AbortController()
  const second = new AbortController()
  const a = service.compile(format(NESTED_PATTERN), { scope: 'a', signal: first.signal }).catch((e: unknown) => e)
  const busyScope = await service.compile(format({ ...NESTED_PATTERN, title: 'b' }), { scope: 'a' }).catch((e: unknown) => e)
  t.match(busyScope, { code: 'rate_limit_exceeded', param: 'response_format' }, 'a second compile of the same scope: 429')
  const b = service.compile(format({ ...NESTED_PATTERN, title: 'c' }), { scope: 'b', signal: second.signal }).catch((e: unknown) => e)
  const busyAll = await service.compile(format({ ...NESTED_PATTERN, title: 'd' }), { scope: 'c' }).catch((e: unknown) => e)
  t.match(busyAll, { code: 'server_overloaded', param: 'response_format' }, 'past the total: 503')
  first.abort()
  second.abort()
  t.ok(await a instanceof CompileCancelled)
  t.ok(await b instanceof CompileCancelled)
  t.match(service.counts, { cancelled: 2, busy: 2, inFlight: 0 })
})

t.test('a serving worker past its memory bound is replaced once idle; generation goes on through the new one', async t => {
  const engine = await LocalEngine.load({ modelDir: MODEL.modelDir, dtype: 'fp32', device: testDevice(), threads: 1 }, {
    delta: (id, d) => { texts.set(id, (texts.get(id) ?? '') + d.content) },
    finish: (id, reason) => done.get(id)?.(reason),
    error: (id, err) => failed.get(id)?.(err),
  })
  t.teardown(() => engine.close())
  const texts = new Map<string, string>()
  const done = new Map<string, (reason: string) => void>()
  const failed = new Map<string, (err: Error) => void>()
  let ports = 0
  const service = new GrammarService(MODEL, { memoryBytes: 1, trialMemoryBytes: 2 ** 30 }, (port, scope) => {
    ports++
    engine.grammars.setPort(port, scope)
  })
  t.teardown(() => service.close())
  const run = (id: string): Promise<string> => {
    const request: GenerateRequest = { messages: [{ role: 'user', content: 'Once upon a time' }], temperature: 0, topP: 1, topK: 0, stop: [], maxTokens: 40, responseFormat: format(ANIMAL), grammarScope: 's' }
    const result = new Promise<string>((resolve, reject) => {
      done.set(id, resolve)
      failed.set(id, reject)
    })
    engine.start(request, id)
    return result
  }
  for (const id of ['a', 'b']) {
    await service.compile(format(ANIMAL), { scope: 's' })
    t.equal(await run(id), 'stop', `${id}: the grammar ended the reply`)
    t.same(Object.keys(JSON.parse(texts.get(id) ?? '')), ['animal'], `${id}: ${texts.get(id)}`)
  }
  t.ok(service.counts.replaced >= 1, `replaced ${service.counts.replaced} times`)
  t.ok(ports >= 2, 'the engine got the new worker\'s port')
})
