// Through the API: the prefix cache is the account's own. Another account
// sending the same prompt (a PIN in it) gets cached_tokens 0 and the same
// reply; cache_salt splits an account's cache further; the operator's shared
// prefix is reused across accounts up to its end only. The server sets the
// cache scope from the authenticated account: nothing a client sends names it.
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import t, { type Test } from 'tap'
import { Accounts } from '../../src/accounts/accounts.ts'
import { CACHE_SALT_MAX } from '../../src/api/chat/schema.ts'
import { loadConfig } from '../../src/config.ts'
import { openMigratedDatabase } from '../../src/store/database.ts'
import { buildTestApp, chatBody } from '../helpers/app.ts'
import { ScriptedBackend } from '../helpers/scripted-backend.ts'
import { startStoriesServer } from '../helpers/stories-server.ts'

const URL = '/api/v1/chat/completions'
const SECRET = 'Once upon a time there was a little dog named Max. His secret number was 4821 and he told nobody.'
const SYSTEM = 'You tell short stories for children about animals, friends, the park, the sea and the sun.'

/** The stories260k server with two accounts: the admin (`keyA`) and another (`keyB`). */
async function twoAccounts (t: Test, env: Record<string, string> = {}) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'chatd-cache-isolation-'))
  t.teardown(() => fs.rmSync(dir, { recursive: true, force: true }))
  const databaseUrl = `sqlite://${path.join(dir, 'chatd.db')}`
  const keyA = `sk-chatd-${'cacheIsolation'.repeat(2)}abcd`
  const { url } = await startStoriesServer(t, { modelId: 'stories', key: keyA, threads: 1, env: { DATABASE_URL: databaseUrl, ...env } })
  const db = await openMigratedDatabase(loadConfig({ DATABASE_URL: databaseUrl }).database)
  t.teardown(() => db.destroy())
  const accounts = new Accounts(db)
  const other = await accounts.create({ email: 'other@example.com', tier: 'unlimited' })
  const { key: keyB } = await accounts.createKey(other.id, { name: 'test' })
  const ask = async (key: string, messages: Array<{ role: string; content: string }>, extra: Record<string, unknown> = {}) => {
    const res = await fetch(`${url}${URL}`, {
      method: 'POST',
      headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'stories', messages, temperature: 0, max_tokens: 12, ...extra }),
    })
    t.equal(res.status, 200)
    const body = await res.json() as { choices: Array<{ message: { content: string } }>; usage: { prompt_tokens: number; prompt_tokens_details: { cached_tokens: number } } }
    return { content: body.choices[0].message.content, prompt: body.usage.prompt_tokens, cached: body.usage.prompt_tokens_details.cached_tokens }
  }
  return { keyA, keyB, ask }
}

t.test('two accounts on a real server: B reuses nothing of A\'s prompt; A reuses its own; cache_salt splits A\'s cache', async t => {
  const { keyA, keyB, ask } = await twoAccounts(t)
  const secret = [{ role: 'user', content: SECRET }]
  const a = await ask(keyA, secret)
  t.equal(a.cached, 0)
  const b = await ask(keyB, secret)
  t.equal(b.cached, 0, 'B sending A\'s exact prompt: cached_tokens 0')
  t.equal(b.content, a.content, 'the same reply')
  const aAgain = await ask(keyA, secret)
  t.equal(aAgain.cached, a.prompt - 1, 'A\'s repeat reuses its own prompt')
  // cache_salt: the same account with another salt reuses nothing; with the same salt it does.
  t.equal((await ask(keyA, secret, { cache_salt: 'tenant-1' })).cached, 0, 'salt tenant-1: nothing of the unsalted cache')
  t.equal((await ask(keyA, secret, { cache_salt: 'tenant-2' })).cached, 0, 'salt tenant-2: nothing of tenant-1\'s')
  t.equal((await ask(keyA, secret, { cache_salt: 'tenant-1' })).cached, a.prompt - 1, 'salt tenant-1 again: reused')
  t.equal((await ask(keyB, secret, { cache_salt: 'tenant-1' })).cached, 0, 'B with A\'s salt: nothing of A\'s')
})

t.test('PREFIX_CACHE_SHARED_PREFIX: another account reuses the shared system prompt, and nothing of the question after it', async t => {
  const { keyA, keyB, ask } = await twoAccounts(t, { PREFIX_CACHE_SHARED_PREFIX: SYSTEM })
  const messages = [{ role: 'system', content: SYSTEM }, { role: 'user', content: 'A story about Max and his secret number 4821.' }]
  const a = await ask(keyA, messages)
  t.equal(a.cached, 0)
  const b = await ask(keyB, messages)
  t.ok(b.cached >= 16, `B reused ${b.cached} tokens of the shared system prompt`)
  t.ok(b.cached < a.prompt - 8, `and nothing of A's question (prompt ${a.prompt} tokens)`)
  t.equal(b.content, a.content, 'the same reply')
  const other = await ask(keyB, [messages[0], { role: 'user', content: 'A story about a cat.' }], { cache_salt: 'x' })
  t.equal(other.cached, b.cached, 'any question after it: the same shared part, whatever the salt')
  t.equal((await ask(keyA, messages)).cached, a.prompt - 1, 'A still reuses its whole prompt')
})

t.test('cache_salt: hostile values get 400 invalid_parameter naming it; the scope is the server\'s, from the account', async t => {
  const backend = new ScriptedBackend()
  const { app, auth } = await buildTestApp(t, { backends: [backend] })
  for (const [name, salt] of [
    ['longer than the maximum', 'x'.repeat(CACHE_SALT_MAX + 1)],
    ['a megabyte', 'x'.repeat(1 << 20)],
    ['empty', ''],
    ['a control character', 'tenant\u0000one'],
    ['a newline', 'tenant\none'],
    ['non-ASCII', 'tenänt'],
    ['a number', 42],
    ['an object', { scope: 'admin' }],
  ] as const) {
    const res = await app.inject({ method: 'POST', url: URL, headers: auth, payload: chatBody({ cache_salt: salt }) })
    t.equal(res.statusCode, name === 'a megabyte' ? 413 : 400, `${name}: refused`)
    if (name === 'a megabyte') continue
    const body = res.json()
    t.same(Object.keys(body.error).sort(), ['code', 'message', 'param', 'type'], `${name}: the API's error shape`)
    t.equal(body.error.code, 'invalid_parameter', `${name}: code`)
    t.equal(body.error.param, 'cache_salt', `${name}: param`)
    t.equal(body.error.message, `Invalid value for 'cache_salt': must be a string of 1 to ${CACHE_SALT_MAX} printable ASCII characters.`, `${name}: says what is allowed`)
  }
  const scopeOf = async (extra: Record<string, unknown>): Promise<string | undefined> => {
    const res = await app.inject({ method: 'POST', url: URL, headers: auth, payload: chatBody(extra) })
    t.equal(res.statusCode, 200)
    return backend.lastRequest?.cacheScope
  }
  const longest = ' ~'.repeat(CACHE_SALT_MAX / 2)
  const plain = await scopeOf({})
  t.ok(plain, 'every request has a scope')
  t.equal(await scopeOf({ cache_salt: null }), plain, 'null: no salt')
  const salted = await scopeOf({ cache_salt: longest })
  t.not(salted, plain, 'the longest printable salt is taken, and splits the scope')
  t.notMatch(salted ?? '', /~/, 'the salt itself does not reach the engine')
  t.equal(await scopeOf({ cacheScope: 'someone-else', cache_scope: 'someone-else' }), plain, 'a client cannot name a scope')
})
