// Property-based fuzzing of the two other doors, in process against a ScriptedBackend: POST
// /api/v1/messages (the Messages API Claude Code speaks) and POST /api/v1/responses (the Responses
// API of Codex and the Agents SDK). Whatever the body, the answer is a 200 in the door's own shape
// (a message or a response, whole or as its event stream, ending as the door's clients expect) or
// a 4xx in the door's error shape (Anthropic's for Messages, the API's own for Responses); never a
// 5xx, a crash or a hang; and afterwards the process is fine.
//
// Bodies: a valid body of the door with one field (at any depth) replaced by a tricky JSON value
// or removed, so every branch of the door's validator and translation is reached; arbitrary JSON;
// and raw JSON text (duplicate keys, odd literals, deep nesting, broken UTF-8, pollution keys).
// CI runs a few hundred cases per property; `npm run fuzz` runs CHATD_FUZZ_RUNS.

import t, { type Test } from 'tap'
import fc from 'fast-check'
import { buildTestApp } from '../helpers/app.ts'
import { rawJsonBody, trickyJson } from '../helpers/fuzz-bodies.ts'
import { assertHolds, checkErrorBody, FUZZ_SEED, fuzzRuns, prototypeIsClean, Tally, withinDeadline, type Answer } from '../helpers/fuzz.ts'
import { ScriptedBackend } from '../helpers/scripted-backend.ts'
import { sseEvents } from '../helpers/sse-events.ts'

/** Longest any one case may take before it counts as a hang (a 1 MB body included). */
const CASE_DEADLINE_MS = 15_000

// The test app's tier allows every model: a 403 would be a door reading the tier before it knows
// the model exists (a model that does not is 404 at every door).
const { app, auth } = await buildTestApp(t, {
  backends: [
    new ScriptedBackend(),
    { backend: new ScriptedBackend({ id: 'thinker', thinking: ['Let me see', '.'], words: ['Yes', '.'] }), reasoning: 'separate' },
  ],
})

const WEATHER_SCHEMA = { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] }

/** Valid Messages bodies: what Claude Code and Anthropic's SDK send, with the optional parts. */
const MESSAGES_BODIES: Array<Record<string, unknown>> = [
  { model: 'scripted', max_tokens: 64, messages: [{ role: 'user', content: 'Tell me a story' }] },
  {
    model: 'thinker',
    max_tokens: 128,
    system: [{ type: 'text', text: 'You are terse.', cache_control: { type: 'ephemeral' } }],
    messages: [
      { role: 'user', content: [{ type: 'text', text: 'Weather in Oslo?' }] },
      { role: 'assistant', content: [{ type: 'thinking', thinking: 'Look it up.', signature: 'sig' }, { type: 'tool_use', id: 'toolu_1', name: 'get_weather', input: { city: 'Oslo' } }] },
      { role: 'user', content: [{ type: 'tool_result', tool_use_id: 'toolu_1', content: [{ type: 'text', text: 'Sunny' }] }] },
    ],
    tools: [{ name: 'get_weather', description: 'Weather now', input_schema: WEATHER_SCHEMA }],
    tool_choice: { type: 'auto' },
    thinking: { type: 'enabled', budget_tokens: 1024 },
    temperature: 0.5,
    stop_sequences: ['END'],
    metadata: { user_id: 'u1' },
    stream: true,
  },
]

/** Valid Responses bodies: a plain input, and the items, tools and options Codex sends. */
const RESPONSES_BODIES: Array<Record<string, unknown>> = [
  { model: 'scripted', input: 'Tell me a story' },
  {
    model: 'thinker',
    instructions: 'You are terse.',
    input: [
      { type: 'message', role: 'developer', content: [{ type: 'input_text', text: 'Answer briefly.' }] },
      { type: 'message', role: 'user', content: [{ type: 'input_text', text: 'Weather in Oslo?' }] },
      { type: 'function_call', call_id: 'call_1', name: 'get_weather', arguments: '{"city":"Oslo"}' },
      { type: 'function_call_output', call_id: 'call_1', output: 'Sunny' },
    ],
    tools: [{ type: 'function', name: 'get_weather', description: 'Weather now', parameters: WEATHER_SCHEMA, strict: false }],
    tool_choice: 'auto',
    parallel_tool_calls: false,
    reasoning: { effort: 'low', summary: 'auto' },
    text: { format: { type: 'text' } },
    max_output_tokens: 64,
    temperature: 0.5,
    store: false,
    stream: true,
  },
]

/** Every path into a JSON value: keys and array indexes, from the root down. */
function pathsOf (value: unknown, prefix: Array<string | number> = []): Array<Array<string | number>> {
  if (Array.isArray(value)) return value.flatMap((item, i) => [[...prefix, i], ...pathsOf(item, [...prefix, i])])
  if (typeof value === 'object' && value !== null) return Object.entries(value).flatMap(([k, v]) => [[...prefix, k], ...pathsOf(v, [...prefix, k])])
  return []
}

/** `body` with the value at `path` replaced (or, for undefined, removed). */
function changed (body: unknown, path: Array<string | number>, to: unknown): unknown {
  const copy = structuredClone(body) as Record<string | number, unknown>
  let at = copy
  for (const step of path.slice(0, -1)) at = at[step] as Record<string | number, unknown>
  const last = path[path.length - 1]
  if (to === undefined) {
    if (Array.isArray(at)) at.splice(last as number, 1)
    else delete at[last]
  } else {
    at[last] = to
  }
  return copy
}

/** A valid body of the door with one field, at any depth, changed to a tricky value or removed. */
function almostValid (bodies: Array<Record<string, unknown>>): fc.Arbitrary<{ path: string, body: unknown }> {
  return fc.constantFrom(...bodies).chain(body => {
    const paths = pathsOf(body)
    return fc.tuple(fc.constantFrom(...paths), fc.option(trickyJson, { nil: undefined, freq: 4 }))
      .map(([path, to]) => ({ path: path.join('.'), body: changed(body, path, to) }))
  })
}

const contentType = (res: Answer): string => String(res.headers['content-type'] ?? '')

function json (res: Answer): any {
  if (!contentType(res).startsWith('application/json')) throw new Error(`content-type ${contentType(res)}, not JSON: ${res.payload.slice(0, 200)}`)
  return JSON.parse(res.payload)
}

/** The Anthropic error type each status goes with (src/api/messages/errors.ts). */
const ANTHROPIC_TYPE: Record<number, string> = { 401: 'authentication_error', 403: 'permission_error', 404: 'not_found_error', 413: 'request_too_large', 429: 'rate_limit_error' }

/** A Messages answer: a message or its stream ending in message_stop, or Anthropic's error shape. */
function checkMessages (res: Answer): string {
  if (res.statusCode >= 500 || res.statusCode === 403) throw new Error(`${res.statusCode}: ${res.payload.slice(0, 500)}`)
  if (res.statusCode === 200 && contentType(res).startsWith('text/event-stream')) {
    const all = sseEvents(res.payload)
    const [last] = all.at(-1) ?? ['']
    if (all[0]?.[0] !== 'message_start' || last !== 'message_stop') throw new Error(`a stream from ${all[0]?.[0]} to ${last}: ${res.payload.slice(-300)}`)
    return '200 stream'
  }
  const body = json(res)
  if (res.statusCode === 200) {
    if (body.type !== 'message' || !Array.isArray(body.content) || typeof body.usage?.output_tokens !== 'number') throw new Error(`200 is not a message: ${res.payload.slice(0, 300)}`)
    return `200 ${body.stop_reason}`
  }
  if (res.statusCode >= 400 && res.statusCode < 500) {
    if (Object.keys(body).sort().join() !== 'error,type' || body.type !== 'error' || Object.keys(body.error ?? {}).sort().join() !== 'message,type') {
      throw new Error(`not Anthropic's error shape: ${res.payload.slice(0, 300)}`)
    }
    if (typeof body.error.message !== 'string' || body.error.message === '') throw new Error('error.message is empty')
    const expected = ANTHROPIC_TYPE[res.statusCode] ?? 'invalid_request_error'
    if (body.error.type !== expected) throw new Error(`${res.statusCode} with error type ${body.error.type}, not ${expected}`)
    return `${res.statusCode} ${body.error.type}`
  }
  throw new Error(`unexpected status ${res.statusCode}: ${res.payload.slice(0, 200)}`)
}

/** A Responses answer: a response or its stream ending completed or incomplete, or the API's error shape. */
function checkResponses (res: Answer): string {
  if (res.statusCode >= 500 || res.statusCode === 403) throw new Error(`${res.statusCode}: ${res.payload.slice(0, 500)}`)
  if (res.statusCode === 200 && contentType(res).startsWith('text/event-stream')) {
    const all = sseEvents(res.payload)
    const [last, data] = all.at(-1) ?? ['', null]
    if (all[0]?.[0] !== 'response.created' || (last !== 'response.completed' && last !== 'response.incomplete')) throw new Error(`a stream from ${all[0]?.[0]} to ${last}: ${JSON.stringify(data).slice(0, 300)}`)
    return `200 stream ${last}`
  }
  const body = json(res)
  if (res.statusCode === 200) {
    if (body.object !== 'response' || !Array.isArray(body.output) || typeof body.usage?.output_tokens !== 'number') throw new Error(`200 is not a response: ${res.payload.slice(0, 300)}`)
    return `200 ${body.status}`
  }
  if (res.statusCode >= 400 && res.statusCode < 500) return `${res.statusCode} ${checkErrorBody(body, res.statusCode)}`
  throw new Error(`unexpected status ${res.statusCode}: ${res.payload.slice(0, 200)}`)
}

const DOORS = [
  { name: 'messages', url: '/api/v1/messages', bodies: MESSAGES_BODIES, check: checkMessages },
  { name: 'responses', url: '/api/v1/responses', bodies: RESPONSES_BODIES, check: checkResponses },
]

async function post (url: string, payload: string | Buffer | object) {
  return await withinDeadline(app.inject({ method: 'POST', url, headers: { ...auth, 'content-type': 'application/json' }, payload }), CASE_DEADLINE_MS, 'one request')
}

/** Runs one property on one door, then prints its figures and checks the process is still well. */
async function fuzz<T> (t: Test, door: typeof DOORS[number], name: string, runs: number, arbitrary: fc.Arbitrary<T>, payload: (value: T) => string | Buffer | object): Promise<void> {
  const tally = new Tally()
  const started = performance.now()
  await assertHolds(t, fc.asyncProperty(arbitrary, async value => {
    tally.add(door.check(await post(door.url, payload(value))))
  }), runs)
  t.comment(`${door.name}, ${name}: ${tally.cases} cases, seed ${FUZZ_SEED}, ${((performance.now() - started) / 1000).toFixed(1)} s; ${tally}`)
  t.ok(prototypeIsClean(), 'Object.prototype untouched')
  const normal = await post(door.url, door.bodies[0])
  t.equal(normal.statusCode, 200, 'a normal request still succeeds')
}

for (const door of DOORS) {
  t.test(`${door.name}: the valid bodies answer 200`, async t => {
    for (const body of door.bodies) {
      const res = await post(door.url, body)
      t.equal(res.statusCode, 200, res.payload.slice(0, 300))
      t.match(door.check(res), /^200 /)
    }
  })

  t.test(`${door.name}: a valid body with one field changed or removed`, async t => {
    await fuzz(t, door, 'almost valid bodies', fuzzRuns(300), almostValid(door.bodies), ({ body }) => JSON.stringify(body))
  })

  t.test(`${door.name}: arbitrary JSON values as the body`, async t => {
    const body = fc.oneof(trickyJson, fc.dictionary(fc.string({ maxLength: 12 }), trickyJson, { maxKeys: 8 }))
    await fuzz(t, door, 'arbitrary JSON', fuzzRuns(150), body, value => JSON.stringify(value) ?? '')
  })

  t.test(`${door.name}: raw JSON text`, async t => {
    await fuzz(t, door, 'raw JSON text', fuzzRuns(150), rawJsonBody(), bytes => bytes)
  })
}
