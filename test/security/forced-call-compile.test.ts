// A forced tool call's schemas on the real server (stories260k): all of a
// request's tools are compiled together, in one trial under one time limit
// (GRAMMAR_COMPILE_TIMEOUT_MS for them all, one compile slot), so a request of
// many tools cannot hold the compile slots for the limit times the tools; a
// failure names the tool it was on; and a request whose compile failed is not
// free: its prompt's estimate stays counted against the minute's tokens.
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import t from 'tap'
import { Accounts } from '../../src/accounts/accounts.ts'
import { openMigratedDatabase } from '../../src/store/database.ts'
import { ENDLESS_PATTERN } from '../helpers/hostile-schemas.ts'
import { startStoriesServer } from '../helpers/stories-server.ts'

const MODEL = 'stories260k'
const dir = mkdtempSync(join(tmpdir(), 'chatd-forced-'))
t.teardown(() => rmSync(dir, { recursive: true, force: true }))
writeFileSync(join(dir, 'tiers.json'), JSON.stringify({ default: 'metered', tiers: { metered: { tokens_per_minute: 1_000_000, models: ['*'] } } }))
const database = join(dir, 'chatd.db')
const server = await startStoriesServer(t, {
  modelId: MODEL,
  key: `sk-chatd-${'forced12'.repeat(4)}`,
  env: { DATABASE_URL: `sqlite://${database}`, TIERS_FILE: join(dir, 'tiers.json'), GRAMMAR_COMPILE_TIMEOUT_MS: '3000' },
})
const db = await openMigratedDatabase({ kind: 'sqlite', path: database })
t.teardown(() => db.destroy())
const accounts = new Accounts(db)
const KEY = (await accounts.createKey((await accounts.create({ email: 'agent@example.com', tier: 'metered' })).id)).key

/** `count` tools, each with arguments of its own schema; `hostile` puts a schema that never compiles at that place. */
function tools (salt: string, count: number, hostile?: number): Array<Record<string, unknown>> {
  return Array.from({ length: count }, (_, i) => ({
    type: 'function',
    function: {
      name: `t${i}`,
      parameters: i === hostile
        ? { type: 'object', properties: { s: ENDLESS_PATTERN }, required: ['s'] }
        : { type: 'object', properties: { [`${salt}${i}`]: { type: 'integer', minimum: i } }, required: [`${salt}${i}`] },
    },
  }))
}

async function post (body: Record<string, unknown>): Promise<Response> {
  return fetch(`${server.url}/api/v1/chat/completions`, {
    method: 'POST',
    headers: { authorization: `Bearer ${KEY}`, 'content-type': 'application/json' },
    body: JSON.stringify({ model: MODEL, messages: [{ role: 'user', content: 'Go' }], temperature: 0, max_tokens: 60, tool_choice: 'required', ...body }),
  })
}

async function compilesStarted (): Promise<number> {
  const text = (await server.app.inject({ url: '/metrics' })).body
  const line = text.split('\n').find(l => l.startsWith(`chatd_grammar_compiles_total{model="${MODEL}",outcome="started"}`))
  return line ? Number(line.split(' ').pop()) : 0
}

async function tokensThisMinute (): Promise<number> {
  const res = await fetch(`${server.url}/api/v1/usage`, { headers: { authorization: `Bearer ${KEY}` } })
  return ((await res.json()) as { used: { tokens_this_minute: number } }).used.tokens_this_minute
}

t.test('a forced call\'s tools compile in one trial, and the call is written', async t => {
  const before = await compilesStarted()
  // Three: what stories260k's 512-token window holds of a tools block and the call.
  const res = await post({ tools: tools('a', 3) })
  t.equal(res.status, 200, await res.clone().text())
  const body = await res.json() as { choices: Array<{ finish_reason: string; message: { tool_calls?: unknown[] } }> }
  t.ok(body.choices[0].message.tool_calls?.length, 'a call')
  t.equal(await compilesStarted() - before, 1, 'one trial for the request\'s three schemas')
})

t.test('one time limit for all of them: fourteen tools, one that never compiles: a 400 naming it, within the one limit', async t => {
  const before = await compilesStarted()
  const tokens = await tokensThisMinute()
  const res = await post({ tools: tools('b', 14, 9) })
  t.equal(res.status, 400)
  const { error } = await res.json() as { error: { code: string; param: string; message: string } }
  t.equal(error.code, 'invalid_parameter')
  t.equal(error.param, 'tools[9].function.parameters', 'names the tool it was on')
  t.match(error.message, /did not compile within 3000 ms \(GRAMMAR_COMPILE_TIMEOUT_MS, for all of them together\)/)
  t.equal(await compilesStarted() - before, 1, 'one trial, one limit')
  t.ok(await tokensThisMinute() > tokens + 100, 'the failed compile is not free: its prompt counts against the minute')
})
