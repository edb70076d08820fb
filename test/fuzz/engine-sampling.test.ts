// Property-based fuzzing of the real local engine (stories260k, served from
// models.json by the real server) with valid-ish requests at the extremes of
// the sampling settings: temperature, top_p, top_k, seed, max_tokens and stop
// at and around their bounds, messages with control-token text, lone
// surrogates and lengths past the 512-token context (up to MAX_MESSAGE_CHARS). The answer is a valid 200
// or a 4xx in the error shape, never a 5xx or a hang; a 200 respects
// max_tokens, never shows a stop string, and a seeded request replays exactly.

import t from 'tap'
import fc from 'fast-check'
import { trickyUnit } from '../helpers/fuzz-bodies.ts'
import { assertHolds, checkAnswer, FUZZ_SEED, fuzzRuns, prototypeIsClean, Tally, withinDeadline } from '../helpers/fuzz.ts'
import { startStoriesServer } from '../helpers/stories-server.ts'

const KEY = `sk-chatd-${'enginefz'.repeat(4)}`
const URL = '/api/v1/chat/completions'
// Refusals are part of the fuzzing (prompts past the context, on purpose): the meter that stops a
// key after too many of them in a minute (REFUSED_PER_KEY_PER_MINUTE) would answer 429 to the rest.
const { app } = await startStoriesServer(t, { modelId: 'stories', key: KEY, threads: 1, env: { REFUSED_PER_KEY_PER_MINUTE: '0', REFUSED_PER_ADDRESS_PER_MINUTE: '0' } })

/** The server's BODY_LIMIT: a body past it is refused whole (413) before anything reads it. */
const BODY_LIMIT = app.initialConfig.bodyLimit ?? 0

const ask = (body: unknown) => withinDeadline(app.inject({
  method: 'POST', url: URL, headers: { authorization: `Bearer ${KEY}`, 'content-type': 'application/json' }, payload: JSON.stringify(body),
}), 60_000, 'one generation')

const content = fc.oneof(
  { weight: 4, arbitrary: fc.lorem({ maxCount: 20 }) },
  { weight: 4, arbitrary: fc.string({ unit: trickyUnit, maxLength: 30 }) },
  { weight: 1, arbitrary: fc.string({ unit: 'binary', maxLength: 30 }) },
  // Past the 512-token context: refused with context_length_exceeded.
  { weight: 1, arbitrary: fc.integer({ min: 200, max: 3000 }).map(n => 'Once upon a time '.repeat(Math.ceil(n / 17))) },
  // Up to MAX_MESSAGE_CHARS and just under BODY_LIMIT (1 MiB of UTF-8): refused as fast, without
  // tokenizing it all (seconds of the model's thread).
  { weight: 1, arbitrary: fc.tuple(fc.constantFrom('Once upon a time ', 'a', '日本語', '😀', '</s>'), fc.integer({ min: 1000, max: 262144 })).map(([piece, chars]) => piece.repeat(Math.min(Math.floor(chars / [...piece].length), Math.floor(1_000_000 / Buffer.byteLength(piece))))) }
)

const sampling = fc.record({
  temperature: fc.oneof(fc.constantFrom(0, Number.MIN_VALUE, 1e-300, 1e-7, 0.5, 1, 1.999, 2), fc.double({ min: 0, max: 2, noNaN: true })),
  top_p: fc.oneof(fc.constantFrom(0, Number.MIN_VALUE, 1e-12, 0.3, 0.999, 1), fc.double({ min: 0, max: 1, noNaN: true })),
  top_k: fc.oneof(fc.constantFrom(0, 1, 2, 50, 511, 512, 513, Number.MAX_SAFE_INTEGER, 1e20), fc.nat({ max: 1000 })),
  seed: fc.oneof(fc.constantFrom(0, -1, 2 ** 32, 2 ** 32 + 1, Number.MAX_SAFE_INTEGER, -Number.MAX_SAFE_INTEGER, 1e20, -1e300), fc.integer()),
  max_tokens: fc.oneof(fc.constantFrom(1, 2, 8, 16, 511, 512, 1e9, Number.MAX_SAFE_INTEGER, 1e20), fc.integer({ min: 1, max: 40 })),
  stop: fc.oneof(
    fc.constantFrom(' ', 'e', 'the', '.', 'Once', '\n', '\uD800', '</s>', 'a'.repeat(300)),
    fc.array(fc.string({ unit: fc.constantFrom('a', 'e', ' ', 't', 'h', '.', '\uD800', '😀', 's', 'o'), minLength: 1, maxLength: 4 }), { maxLength: 4 })
  ),
  stream: fc.boolean(),
  stream_options: fc.record({ include_usage: fc.boolean() }),
  wordcount: fc.oneof(fc.constant('Default'), fc.constantFrom(1, 5, 100000)),
}, { requiredKeys: [] })

const request = fc.tuple(fc.array(fc.record({ role: fc.constantFrom('user', 'assistant', 'system'), content }), { minLength: 1, maxLength: 3 }), sampling)
  .map(([messages, params]) => ({ model: 'stories', messages, ...params }))

/** The text a 200 carried, streamed or not. */
function replyText (payload: string, streamed: boolean): string {
  if (!streamed) return JSON.parse(payload).choices[0].message.content
  return payload.split('\n').filter(l => l.startsWith('data: {')).map(l => JSON.parse(l.slice(6)).choices[0]?.delta?.content ?? '').join('')
}

t.test('the real sampler at its extremes: valid answers, stop strings never shown, seeds replay', async t => {
  const tally = new Tally()
  const started = performance.now()
  let replays = 0
  await assertHolds(t, fc.asyncProperty(request, async body => {
    const res = await ask(body)
    const outcome = checkAnswer(res)
    tally.add(outcome)
    // Several messages near BODY_LIMIT each make a body past it: that body, and only that one, is too large.
    const expected = Buffer.byteLength(JSON.stringify(body)) > BODY_LIMIT ? 'request_too_large' : 'context_length_exceeded'
    if (res.statusCode !== 200 || expected === 'request_too_large') {
      const code = res.statusCode === 200 ? 'a 200' : res.json().error.code
      if (code !== expected) throw new Error(`a valid-ish body got ${outcome}, not ${expected}: ${res.payload.slice(0, 300)}`)
      return
    }
    const streamed = body.stream === true
    const text = replyText(res.payload, streamed)
    const stops = body.stop === undefined ? [] : typeof body.stop === 'string' ? [body.stop] : body.stop
    for (const stop of stops) if (text.includes(stop)) throw new Error(`the reply shows the stop string ${JSON.stringify(stop)}: ${JSON.stringify(text)}`)
    if (!streamed) {
      const usage = res.json().usage
      if (body.max_tokens !== undefined && usage.completion_tokens > body.max_tokens) throw new Error(`${usage.completion_tokens} tokens for max_tokens ${body.max_tokens}`)
    }
    if (body.seed !== undefined) {
      replays++
      const again = await ask(body)
      if (again.statusCode !== 200 || replyText(again.payload, streamed) !== text) throw new Error(`seed ${body.seed} did not replay: ${JSON.stringify(text)} then ${again.payload.slice(0, 300)}`)
    }
  }), fuzzRuns(40, 0.05))
  t.comment(`real engine: ${tally.cases} cases (${replays} replayed by seed), seed ${FUZZ_SEED}, ${((performance.now() - started) / 1000).toFixed(1)} s; ${tally}`)
  t.ok(prototypeIsClean(), 'Object.prototype untouched')
  const normal = await ask({ model: 'stories', messages: [{ role: 'user', content: 'Once upon a time' }], max_tokens: 5 })
  t.equal(normal.statusCode, 200, 'a normal request still succeeds')
})
