// Property-based fuzzing of POST /api/v1/chat/completions bodies, in process
// against ScriptedBackend models: whatever the body, the answer is a 4xx in the
// exact error shape of src/errors.ts's table, or a 200 chat.completion / SSE
// stream; never a 5xx, a crash or a hang; and afterwards the process is fine
// (Object.prototype untouched, a normal request still succeeds).
//
// CI runs a few hundred cases per property with a fixed seed; `npm run fuzz`
// runs CHATD_FUZZ_RUNS (20000) per property. Each property prints its case
// count, time and outcomes.

import t, { type Test } from 'tap'
import fc from 'fast-check'
import type { FastifyInstance } from 'fastify'
import { buildTestApp, chatBody } from '../helpers/app.ts'
import { almostValidBody, DEPENDENT_FIELDS, rawJsonBody, trickyJson, validBody } from '../helpers/fuzz-bodies.ts'
import { assertHolds, checkAnswer, FUZZ_SEED, fuzzRuns, prototypeIsClean, Tally, withinDeadline } from '../helpers/fuzz.ts'
import { ScriptedBackend } from '../helpers/scripted-backend.ts'

const URL = '/api/v1/chat/completions'
/** Longest any one case may take before it counts as a hang (a 1 MB body included). */
const CASE_DEADLINE_MS = 15_000

const { app, auth } = await buildTestApp(t, {
  backends: [
    new ScriptedBackend(),
    // A reasoning model, so the thinking split and reasoning_content are fuzzed too.
    { backend: new ScriptedBackend({ id: 'thinker', thinking: ['Let me see', '.'], words: ['Yes', '.'] }), reasoning: 'separate' },
  ],
})

async function post (app: FastifyInstance, payload: string | Buffer | object, headers: Record<string, string> = {}) {
  return await withinDeadline(app.inject({ method: 'POST', url: URL, headers: { ...auth, 'content-type': 'application/json', ...headers }, payload }), CASE_DEADLINE_MS, 'one request')
}

/** Runs one property, then prints its figures and checks the process is still well. */
async function fuzz<T> (t: Test, name: string, runs: number, arbitrary: fc.Arbitrary<T>, check: (value: T, tally: Tally) => Promise<void>): Promise<void> {
  const tally = new Tally()
  const started = performance.now()
  await assertHolds(t, fc.asyncProperty(arbitrary, value => check(value, tally)), runs)
  const seconds = ((performance.now() - started) / 1000).toFixed(1)
  t.comment(`${name}: ${tally.cases} cases, seed ${FUZZ_SEED}, ${seconds} s; ${tally}`)
  t.ok(prototypeIsClean(), 'Object.prototype untouched')
  const normal = await post(app, chatBody())
  t.equal(normal.statusCode, 200, 'a normal request still succeeds')
}

t.test('fully valid bodies: 200 chat.completion or SSE stream', async t => {
  await fuzz(t, 'valid bodies', fuzzRuns(300), fc.tuple(fc.constantFrom('scripted', 'thinker'), fc.nat()).chain(([model]) => validBody(model)), async (body, tally) => {
    const res = await post(app, body)
    const outcome = checkAnswer(res)
    if (res.statusCode !== 200) throw new Error(`a valid body got ${outcome}: ${res.payload.slice(0, 300)}`)
    tally.add(outcome)
  })
})

t.test('almost valid bodies: 200, or a 4xx about the changed field', async t => {
  await fuzz(t, 'almost valid bodies', fuzzRuns(500), almostValidBody(), async ({ path, body }, tally) => {
    const res = await post(app, body)
    const outcome = checkAnswer(res)
    tally.add(outcome)
    if (res.statusCode === 400 || res.statusCode === 404) {
      const { param } = res.json().error as { param: string | null }
      // The refusal names the field that was changed, or the object holding it.
      const related = param === null || param === path || path.startsWith(`${param}.`) || path.startsWith(`${param}[`) || param.startsWith(`${path}.`) || param.startsWith(`${path}[`) ||
        (DEPENDENT_FIELDS[path] ?? []).includes(param)
      if (!related) throw new Error(`changed ${path}, the error names ${param}: ${res.payload.slice(0, 300)}`)
    }
  })
})

t.test('arbitrary JSON values as the body', async t => {
  const body = fc.oneof(trickyJson, fc.dictionary(fc.string({ maxLength: 12 }), trickyJson, { maxKeys: 8 }))
  await fuzz(t, 'arbitrary JSON', fuzzRuns(300), body, async (value, tally) => {
    const res = await post(app, JSON.stringify(value) ?? '')
    tally.add(checkAnswer(res))
  })
})

t.test('valid bodies on a tight tier: 200 or 429 with Retry-After, the limiter never fails', async t => {
  // Token budgets and the per-request cap meet max_tokens up to 1e20, wordcount budgets and huge prompts.
  const tight = await buildTestApp(t, {
    tier: 'tight',
    tiers: JSON.stringify({ default: 'tight', tiers: { tight: { requests_per_minute: 1000000, tokens_per_minute: 3000, calls_per_month: 1000000, max_tokens_per_request: 64, models: ['*'] } } }),
  })
  const body = fc.tuple(validBody(), fc.option(fc.constantFrom(1, 64, 65, 3000, 1e9, Number.MAX_SAFE_INTEGER, 1e20), { nil: undefined }))
    .map(([b, maxTokens]) => maxTokens === undefined ? b : { ...b, max_tokens: maxTokens })
  const tally = new Tally()
  const started = performance.now()
  await assertHolds(t, fc.asyncProperty(body, async b => {
    const res = await withinDeadline(tight.app.inject({ method: 'POST', url: URL, headers: { ...tight.auth, 'content-type': 'application/json' }, payload: b }), CASE_DEADLINE_MS, 'one request')
    const outcome = checkAnswer(res)
    tally.add(outcome)
    if (res.statusCode === 429 && !/^\d+$/.test(String(res.headers['retry-after']))) throw new Error(`429 without a Retry-After in seconds: ${res.headers['retry-after']}`)
    if (res.statusCode === 200 && !String(res.headers['content-type']).startsWith('text/event-stream') && res.json().usage.completion_tokens > 64) throw new Error('the tier\'s max_tokens_per_request was passed')
  }), fuzzRuns(200, 0.5))
  t.comment(`tight tier: ${tally.cases} cases, seed ${FUZZ_SEED}, ${((performance.now() - started) / 1000).toFixed(1)} s; ${tally}`)
  t.ok(prototypeIsClean(), 'Object.prototype untouched')
})

t.test('raw JSON text: duplicate keys, odd literals, deep nesting, broken UTF-8, pollution keys', async t => {
  await fuzz(t, 'raw JSON text', fuzzRuns(500), rawJsonBody(), async (bytes, tally) => {
    const res = await post(app, bytes)
    tally.add(checkAnswer(res))
  })
})
