// A hostile response_format on the real server (stories260k): the schemas that
// once stopped or stalled chatd each get a 4xx in the API's error shape, while
// another account's completions, started while the hostile compile runs, still
// complete; compiles happen only after admission (a rate-limited key compiles
// nothing), are cancelled when the client leaves, are bounded in flight per
// account, and are cached per account (another account's first use of a
// schema is a compile of its own). Compiles are observed through /metrics.
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import t from 'tap'
import { Accounts } from '../../src/accounts/accounts.ts'
import { openMigratedDatabase } from '../../src/store/database.ts'
import { anyOfChain, ENDLESS_PATTERN, refChain } from '../helpers/hostile-schemas.ts'
import { exitIfLingering } from '../helpers/linger.ts'
import { startStoriesServer } from '../helpers/stories-server.ts'

const MODEL = 'stories260k'
const KEY = `sk-chatd-${'hostile1'.repeat(4)}`
const dir = mkdtempSync(join(tmpdir(), 'chatd-grammar-'))
t.teardown(() => rmSync(dir, { recursive: true, force: true }))
const tiers = { default: 'unlimited', tiers: { unlimited: { models: ['*'] }, tight: { requests_per_minute: 1, models: ['*'] } } }
writeFileSync(join(dir, 'tiers.json'), JSON.stringify(tiers))
const database = { kind: 'sqlite' as const, path: join(dir, 'chatd.db') }
const server = await startStoriesServer(t, {
  modelId: MODEL,
  key: KEY,
  // Long enough that a 2-token completion is done well before it, whatever the machine's load.
  env: { DATABASE_URL: `sqlite://${database.path}`, TIERS_FILE: join(dir, 'tiers.json'), GRAMMAR_COMPILE_TIMEOUT_MS: '5000' },
})
const db = await openMigratedDatabase(database)
t.teardown(() => db.destroy())
const accounts = new Accounts(db)
const keyOf = async (email: string, tier: string): Promise<string> => (await accounts.createKey((await accounts.create({ email, tier })).id)).key
const BYSTANDER = await keyOf('bystander@example.com', 'unlimited')
const TIGHT = await keyOf('tight@example.com', 'tight')

const messages = [{ role: 'user', content: 'Once upon a time' }]
const format = (schema: unknown, strict = true) => ({ type: 'json_schema', json_schema: { name: 'x', schema, strict } })
const ANIMAL = { type: 'object', properties: { animal: { type: 'string', enum: ['cat', 'dog'] } }, required: ['animal'], additionalProperties: false }

function post (key: string, body: Record<string, unknown>, signal?: AbortSignal): Promise<Response> {
  return fetch(`${server.url}/api/v1/chat/completions`, {
    method: 'POST',
    headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
    body: JSON.stringify({ model: MODEL, messages, temperature: 0, ...body }),
    signal,
  })
}

interface Reply {
  error: { message: string; type: string; param: string | null; code: string }
  usage: { completion_tokens: number }
  choices: Array<{ message: { content: string } }>
}
const json = (res: Response): Promise<Reply> => res.json() as Promise<Reply>

/** chatd_grammar_compiles_total's outcome, or chatd_grammar_compiles_in_flight with 'in_flight'. */
async function metric (outcome: string): Promise<number> {
  const text = (await server.app.inject({ url: '/metrics' })).body
  const line = outcome === 'in_flight'
    ? text.split('\n').find(l => l.startsWith(`chatd_grammar_compiles_in_flight{model="${MODEL}"}`))
    : text.split('\n').find(l => l.startsWith(`chatd_grammar_compiles_total{model="${MODEL}",outcome="${outcome}"}`))
  return line ? Number(line.split(' ').pop()) : 0
}

/** Waits until `check` holds; fails the test (does not hang it) after a minute. */
async function until (what: string, check: () => Promise<boolean>): Promise<void> {
  const deadline = Date.now() + 60_000
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`never happened: ${what}`)
    await new Promise(resolve => setTimeout(resolve, 10))
  }
}

t.test('each hostile schema gets a 4xx naming response_format while another account\'s completions complete', async t => {
  // The bystander's own schema, compiled before (its cache), and a plain request: both must flow.
  t.equal((await post(BYSTANDER, { max_tokens: 40, response_format: format(ANIMAL) })).status, 200)
  for (const [name, schema] of [['the 200-level $ref chain', refChain(200)], ['the nested pattern', ENDLESS_PATTERN], ['the 70-level anyOf chain', anyOfChain(70)]] as const) {
    const started = await metric('started')
    let settled = false
    const hostile = post(KEY, { max_tokens: 5, response_format: format(schema) }).finally(() => { settled = true })
    await until(`${name}: its compile started`, async () => settled || await metric('started') > started)
    const pendingWhenBystanderStarted = !settled
    const plain = await post(BYSTANDER, { max_tokens: 2 })
    t.equal(plain.status, 200, `${name}: a plain 2-token completion answered`)
    t.equal((await json(plain)).usage.completion_tokens, 2)
    const constrained = await post(BYSTANDER, { max_tokens: 40, response_format: format(ANIMAL) })
    t.equal(constrained.status, 200, `${name}: a constrained completion with a cached schema answered`)
    t.ok(['cat', 'dog'].includes(JSON.parse((await json(constrained)).choices[0].message.content).animal))
    if (name === 'the nested pattern') {
      // Its compile runs until the limit (5 s): the bystander's requests went in while it ran.
      t.ok(pendingWhenBystanderStarted, `${name}: the bystander's requests started while the hostile compile was running`)
      t.comment(`${name}: the hostile request was ${settled ? 'already answered' : 'still compiling'} when the bystander's were done`)
    }
    const res = await hostile
    t.ok(res.status >= 400 && res.status < 500, `${name}: ${res.status}`)
    const { error } = await json(res)
    t.equal(error.code, 'invalid_parameter', `${name}: ${error.message}`)
    t.equal(error.param, 'response_format')
    if (name === 'the nested pattern') t.match(error.message, /5000 ms.*GRAMMAR_COMPILE_TIMEOUT_MS/, 'the limit is named')
  }
  t.equal(await metric('timed_out'), 1, 'the pattern was stopped by the time limit')
  t.ok(await metric('failed') >= 2, 'the two chains broke their trial workers, not the server')
  t.equal((await post(KEY, { max_tokens: 40, response_format: format(ANIMAL) })).status, 200, 'the hostile account itself is served afterwards')
})

t.test('a rate-limited key compiles nothing', async t => {
  t.equal((await post(TIGHT, { max_tokens: 1 })).status, 200, 'its one request this minute')
  const started = await metric('started')
  const res = await post(TIGHT, { max_tokens: 5, response_format: format({ type: 'object', properties: { tight: { type: 'integer' } }, required: ['tight'] }) })
  t.equal(res.status, 429)
  t.equal((await json(res)).error.code, 'rate_limit_exceeded')
  t.equal(await metric('started'), started, 'no compile started for it')
})

t.test('grammars are cached per account: another account\'s first use of a schema is a compile', async t => {
  const schema = { type: 'object', properties: { cached: { type: 'boolean' } }, required: ['cached'], additionalProperties: false }
  const compiles = await metric('started')
  t.equal((await post(BYSTANDER, { max_tokens: 20, response_format: format(schema) })).status, 200)
  t.equal(await metric('started'), compiles + 1, 'the first use compiles')
  t.equal((await post(BYSTANDER, { max_tokens: 20, response_format: format(schema) })).status, 200)
  t.equal(await metric('started'), compiles + 1, 'the same account again: cached')
  t.equal((await post(KEY, { max_tokens: 20, response_format: format(schema) })).status, 200)
  t.equal(await metric('started'), compiles + 2, 'another account: a compile of its own, never the first account\'s cache')
})

t.test('a client that leaves cancels its compile; at most two compiles per account at once', async t => {
  const cancelled = await metric('cancelled')
  const first = new AbortController()
  const second = new AbortController()
  const a = post(KEY, { max_tokens: 5, response_format: format(ENDLESS_PATTERN) }, first.signal).catch(() => null)
  const b = post(KEY, { max_tokens: 5, response_format: format({ ...ENDLESS_PATTERN, description: 'another' }) }, second.signal).catch(() => null)
  await until('two compiles in flight', async () => await metric('in_flight') >= 2)
  const third = await post(KEY, { max_tokens: 5, response_format: format({ ...ENDLESS_PATTERN, description: 'a third' }) })
  t.equal(third.status, 429, 'a third new schema of the same account at once is refused')
  const error = (await json(third)).error
  t.equal(error.code, 'rate_limit_exceeded')
  t.equal(error.param, 'response_format')
  t.equal(third.headers.get('retry-after'), '1')
  first.abort()
  second.abort()
  await Promise.all([a, b])
  await until('both compiles cancelled', async () => await metric('cancelled') >= cancelled + 2 && await metric('in_flight') === 0)
  t.pass('the compiles of clients that left were stopped (their workers terminated)')
  t.equal((await post(BYSTANDER, { max_tokens: 2 })).status, 200, 'and the server goes on')
})

const last = t.test('strict means enforced: what the grammar cannot honour is a 400 before the request counts', async t => {
  const cases: Array<[string, unknown, RegExp]> = [
    ['a self-referencing $ref', { $ref: '#/$defs/a', $defs: { a: { $ref: '#/$defs/a' } } }, /no finite instance/],
    ['a required recursive property', { type: 'object', properties: { next: { $ref: '#' } }, required: ['next'] }, /no finite instance/],
    ['not', { type: 'string', not: { const: 'x' } }, /"not"/],
    ['contradictory allOf', { allOf: [{ type: 'string' }, { type: 'integer' }] }, /allOf/],
    ['a remote $ref', { $ref: 'https://example.com/schema.json' }, /not a reference inside the schema/],
    ['a $ref to nowhere', { $ref: '#/$defs/missing' }, /points to nothing/],
  ]
  const started = await metric('started')
  for (const [name, schema, reason] of cases) {
    const res = await post(TIGHT, { max_tokens: 5, response_format: format(schema) })
    t.equal(res.status, 400, name)
    const { error } = await json(res)
    t.equal(error.code, 'invalid_parameter', name)
    t.equal(error.param, 'response_format', name)
    t.match(error.message, reason, `${name}: ${error.message}`)
  }
  t.equal(await metric('started'), started, 'nothing compiled: refused before admission (the rate-limited key got 400s, not 429s)')
  const loose = await post(BYSTANDER, { max_tokens: 20, response_format: format({ type: 'string', not: { const: 'x' } }, false) })
  t.equal(loose.status, 200, 'without strict, "not" is ignored')
})
// Lingered once after passing, in a whole-suite CI run, when the guard only wrote the open handles
// to stderr. Not seen since: run alone (3 runs) and three at once (12 runs, with and without tap's
// runner) it ended with nothing open. No kind of handle is known to be left, so none is named: if
// it lingers again the file fails, with the handles named in its TAP output. See test/helpers/linger.ts.
exitIfLingering(t, last, { graceMs: 20_000 })
