// One account's new schema compiles in that account's own serving grammar
// worker: while account B's slow schema compiles where it will serve, account
// A's constrained generation (its schema compiled already) gets its masks and
// finishes. Serving workers are bounded: a new scope takes over the least
// recently used worker that no request uses, and is refused with 503 when none can.
import { once } from 'node:events'
import t, { type Test } from 'tap'
import type { GenerateRequest } from '../../../../src/engine/backend.ts'
import { LocalEngine } from '../../../../src/engine/onnx/scheduler/engine.ts'
import type { JsonFormat } from '../../../../src/engine/onnx/grammar/grammar.ts'
import { GrammarService } from '../../../../src/engine/onnx/grammar/grammar-service.ts'
import { SLOW_PATTERN } from '../../../helpers/hostile-schemas.ts'
import { storiesModelDir } from '../../../helpers/models.ts'
import { testDevice } from '../../../helpers/webgpu.ts'

const MODEL = { modelDir: storiesModelDir(), dtype: 'fp32' as const }
const format = (schema: Record<string, unknown>): JsonFormat => ({ type: 'json_schema', json_schema: { name: 'x', schema, strict: true } })
const ANIMAL = { type: 'object', properties: { animal: { type: 'string', enum: ['cat', 'dog'] } }, required: ['animal'], additionalProperties: false }

async function engineWith (t: Test) {
  const events: string[] = []
  const done = new Map<string, (reason: string) => void>()
  const failed = new Map<string, (err: Error) => void>()
  const engine = await LocalEngine.load({ modelDir: MODEL.modelDir, dtype: 'fp32', device: testDevice(), threads: 1 }, {
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
  const slow = service.compile(format(SLOW_PATTERN), { scope: 'b' }).then(() => { events.push('b:compiled') })
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

t.test('serving workers are bounded: the least recently used idle one goes; none free is a 503', async t => {
  const ports: string[] = []
  const service = new GrammarService(MODEL, { workers: 2 }, (_port, scope) => { ports.push(scope) })
  t.teardown(() => service.close())
  await service.compile(format(ANIMAL), { scope: 'a' })
  await service.compile(format(ANIMAL), { scope: 'b' })
  t.match(service.counts, { workers: 2, reassigned: 0, compiles: 2 })
  await service.compile(format(ANIMAL), { scope: 'a' })
  t.equal(service.counts.compiles, 2, 'a schema its account compiled is cached, and marks its worker as used')

  await service.compile(format(ANIMAL), { scope: 'c' })
  t.match(service.counts, { workers: 2, reassigned: 1, retired: 0, compiles: 3 }, 'a third account took over one (the thread kept, its grammars dropped)')
  await service.compile(format(ANIMAL), { scope: 'a' })
  t.equal(service.counts.compiles, 3, 'the least recently used (b) went, not a')

  // Both workers hold running requests: nothing can go.
  const releaseA = service.hold('a')
  const releaseC = service.hold('c')
  const err = await service.compile(format(ANIMAL), { scope: 'd' }).catch((e: unknown) => e)
  t.match(err, { code: 'server_overloaded', param: 'response_format', headers: { 'retry-after': '1' }, message: /GRAMMAR_WORKERS_MAX/ })
  t.match(service.counts, { workers: 2, reassigned: 1, compiles: 3, inFlight: 0 }, 'refused before any compile')
  releaseC()
  await service.compile(format(ANIMAL), { scope: 'd' })
  t.match(service.counts, { workers: 2, reassigned: 2, retired: 0, compiles: 4 }, 'once c ended, d took its place')
  await service.compile(format(ANIMAL), { scope: 'a' })
  t.equal(service.counts.compiles, 4, 'a, held throughout, kept its worker and its grammars')
  releaseA()
  t.same(ports, ['a', 'b', 'c', 'd'], 'each scope\'s new port went to the engine with its scope')
})

t.test('a worker whose requests have ended makes room at once for another account', async t => {
  const { engine, run } = await engineWith(t)
  const service = new GrammarService(MODEL, { workers: 1 }, (port, scope) => engine.grammars.setPort(port, scope))
  t.teardown(() => service.close())
  await service.compile(format(ANIMAL), { scope: 'a' })
  const releaseA = service.hold('a')
  t.equal(await run('a1', 'a', ANIMAL), 'stop', 'A generates')
  releaseA()
  // Its matcher's close may still be on its way to the worker: no 503 for that.
  await service.compile(format(ANIMAL), { scope: 'b' })
  t.match(service.counts, { workers: 1, reassigned: 1 }, 'A\'s worker was handed to B')
  t.equal(await run('b1', 'b', ANIMAL), 'stop', 'B generates through its own worker')
  const err = await run('a2', 'a', ANIMAL).catch((e: unknown) => e)
  t.match(err, { message: /grammar worker/ }, 'a request of A\'s that skipped its compile finds no worker: an error, not another account\'s grammars')

  // Back to A through the same thread: B's grammars were dropped, A's schema is compiled anew.
  const compiles = service.counts.compiles
  await service.compile(format(ANIMAL), { scope: 'a' })
  t.equal(service.counts.compiles, compiles + 1, 'A\'s schema is compiled again: nothing of its first time stayed')
  t.match(service.counts, { workers: 1, reassigned: 2, retired: 0, replaced: 0 }, 'still the one thread')
  t.equal(await run('a3', 'a', ANIMAL), 'stop', 'A generates again')
  const errB = await run('b2', 'b', ANIMAL).catch((e: unknown) => e)
  t.match(errB, { message: /grammar worker/ }, 'and B, whose worker it was, finds none')
})

t.test('an account\'s new schema compiles where it serves only once that account\'s running requests have ended', async t => {
  const order: string[] = []
  const service = new GrammarService(MODEL, { compileTimeoutMs: 120_000 }, () => {})
  t.teardown(() => service.close())
  await service.compile(format(ANIMAL), { scope: 'a' })
  const running = service.hold('a') // A's constrained request is generating
  for (const event of ['waiting', 'serving', 'served']) service.on(event, () => order.push(event))
  const waiting = once(service, 'waiting')
  const slow = service.compile(format({ type: 'string', pattern: '^(ab|ba){3}$' }), { scope: 'a' }).then(() => order.push('compiled'))
  await waiting
  // A's next request, its schema cached, waits for the compile before it starts.
  const cached = service.compile(format(ANIMAL), { scope: 'a' }).then(() => order.push('cached'))
  order.push('request ended')
  running()
  await Promise.all([slow, cached])
  t.same(order, ['waiting', 'request ended', 'serving', 'served', 'compiled', 'cached'],
    'the serving compile waited for the running request; the next request waited for the compile')
  const left = new AbortController()
  const again = service.hold('a')
  const pending = service.compile(format({ type: 'string', pattern: '^(ab|ba){4}$' }), { scope: 'a', signal: left.signal }).catch((e: unknown) => e)
  await once(service, 'waiting')
  left.abort()
  t.match(await pending, { name: 'Error', message: /client left/ }, 'a client that leaves while it waits is let go')
  again()
  t.match(service.counts, { inFlight: 0 })
})
