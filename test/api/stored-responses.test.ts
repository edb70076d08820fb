// GET /api/v1/responses/{id}, DELETE /api/v1/responses/{id} and
// GET /api/v1/responses/{id}/input_items over a real app: the stored response
// exactly as returned, OpenAI's shapes, per-account 404s, list paging and its
// refusals, a deleted response breaking its conversation, and a rebuilt app
// (a restart) reading what the previous one stored, on SQLite and PostgreSQL.

import t from 'tap'
import type { Test } from 'tap'
import { Accounts } from '../../src/accounts/accounts.ts'
import { buildApp } from '../../src/app.ts'
import { loadConfig } from '../../src/config.ts'
import { ModelRegistry } from '../../src/engine/registry.ts'
import { StoredResponses, type StoredResponseRecord } from '../../src/responses/stored-responses.ts'
import { openMigratedDatabase } from '../../src/store/database.ts'
import { buildTestApp } from '../helpers/app.ts'
import { testDatabase, type DatabaseKind } from '../helpers/databases.ts'

function turn (accountId: number, id: string, previous: string | null, output?: Array<Record<string, unknown>>): StoredResponseRecord {
  return {
    id,
    accountId,
    previousResponseId: previous,
    model: 'scripted',
    createdAt: 1_700_000_000,
    response: {
      id,
      object: 'response',
      created_at: 1_700_000_000,
      status: 'completed',
      model: 'scripted',
      previous_response_id: previous,
      output: output ?? [{ id: `msg_out_${id}`, type: 'message', role: 'assistant', status: 'completed', content: [{ type: 'output_text', text: `answer of ${id} ✓`, annotations: [] }] }],
      usage: { input_tokens: 3, output_tokens: 4, total_tokens: 7, input_tokens_details: { cached_tokens: 0 }, output_tokens_details: { reasoning_tokens: 0 } },
      metadata: { nested: { deeper: [1, 2.5, null, true, 'x'] } },
    },
    input: [{ id: `msg_in_${id}`, type: 'message', role: 'user', content: [{ type: 'input_text', text: `question of ${id}` }] }],
  }
}

async function setup (t: Test, env: Record<string, string> = {}) {
  const built = await buildTestApp(t, { env })
  const store = new StoredResponses(built.db, { limits: built.config.storedResponses })
  const other = await built.accounts.create({ email: 'other@example.com', tier: 'unlimited' })
  const { key: otherKey } = await built.accounts.createKey(other.id, { name: 'other' })
  return { ...built, store, other, otherAuth: { authorization: `Bearer ${otherKey}` } }
}

t.test('GET returns the stored response exactly as it was returned; DELETE answers OpenAI\'s shape and it is gone', async t => {
  const { app, auth, store, account } = await setup(t)
  const record = turn(account.id, 'resp_abc', null)
  await store.save(record)

  const got = await app.inject({ method: 'GET', url: '/api/v1/responses/resp_abc', headers: auth })
  t.equal(got.statusCode, 200)
  t.match(got.headers['content-type'], /^application\/json/)
  t.equal(got.body, JSON.stringify(record.response), 'the very JSON')
  t.same(got.json(), record.response)

  const withInclude = await app.inject({ method: 'GET', url: '/api/v1/responses/resp_abc?include[]=reasoning.encrypted_content&stream=false', headers: auth })
  t.equal(withInclude.statusCode, 200, 'include and stream=false are accepted')

  const streamed = await app.inject({ method: 'GET', url: '/api/v1/responses/resp_abc?stream=true', headers: auth })
  t.equal(streamed.statusCode, 400)
  t.match(streamed.json(), { error: { type: 'invalid_request_error', code: 'invalid_parameter', param: 'stream' } })

  const deleted = await app.inject({ method: 'DELETE', url: '/api/v1/responses/resp_abc', headers: auth })
  t.equal(deleted.statusCode, 200)
  t.same(deleted.json(), { id: 'resp_abc', object: 'response.deleted', deleted: true })

  for (const [method, url] of [['GET', '/api/v1/responses/resp_abc'], ['DELETE', '/api/v1/responses/resp_abc'], ['GET', '/api/v1/responses/resp_abc/input_items']] as const) {
    const res = await app.inject({ method, url, headers: auth })
    t.equal(res.statusCode, 404, `${method} ${url} after deletion`)
    t.same(res.json(), { error: { message: 'No stored response with id \'resp_abc\'.', type: 'not_found_error', param: 'response_id', code: 'not_found' } })
  }

  const unauthenticated = await app.inject({ method: 'GET', url: '/api/v1/responses/resp_abc' })
  t.equal(unauthenticated.statusCode, 401)
})

t.test('another account\'s response is 404 for every route, and stays its owner\'s', async t => {
  const { app, auth, otherAuth, store, account } = await setup(t)
  await store.save(turn(account.id, 'resp_mine', null))
  for (const [method, url] of [['GET', '/api/v1/responses/resp_mine'], ['DELETE', '/api/v1/responses/resp_mine'], ['GET', '/api/v1/responses/resp_mine/input_items']] as const) {
    const res = await app.inject({ method, url, headers: otherAuth })
    t.equal(res.statusCode, 404, `${method} ${url}`)
    t.match(res.json(), { error: { type: 'not_found_error', code: 'not_found', param: 'response_id' } })
  }
  t.equal((await app.inject({ method: 'GET', url: '/api/v1/responses/resp_mine', headers: auth })).statusCode, 200, 'the owner still has it')

  const long = 'resp_' + 'x'.repeat(90)
  const res = await app.inject({ method: 'GET', url: `/api/v1/responses/${long}`, headers: auth })
  t.equal(res.statusCode, 404, 'an id no response can have')
  t.equal(res.json().error.code, 'not_found')
})

t.test('input_items: the whole conversation the model saw, newest first by default, in pages', async t => {
  const { app, auth, store, account } = await setup(t)
  await store.save(turn(account.id, 'resp_1', null))
  await store.save(turn(account.id, 'resp_2', 'resp_1', [
    { id: 'fc_2', type: 'function_call', call_id: 'call_2', name: 'lookup', arguments: '{"q":"x"}', status: 'completed' },
  ]))
  await store.save({ ...turn(account.id, 'resp_3', 'resp_2'), input: [{ id: 'fco_3', type: 'function_call_output', call_id: 'call_2', output: 'found' }, { id: 'msg_in_resp_3', type: 'message', role: 'user', content: [{ type: 'input_text', text: 'and?' }] }] })
  const all = ['msg_in_resp_1', 'msg_out_resp_1', 'msg_in_resp_2', 'fc_2', 'fco_3', 'msg_in_resp_3']

  const list = async (query: string) => {
    const res = await app.inject({ method: 'GET', url: `/api/v1/responses/resp_3/input_items${query}`, headers: auth })
    t.equal(res.statusCode, 200, query)
    return res.json() as { object: string; data: Array<{ id: string }>; first_id: string | null; last_id: string | null; has_more: boolean }
  }
  const desc = await list('')
  t.same(desc.data.map(i => i.id), [...all].reverse(), 'default: desc, every item, its own output excluded')
  t.match(desc, { object: 'list', first_id: 'msg_in_resp_3', last_id: 'msg_in_resp_1', has_more: false })
  t.same(desc.data.find(i => i.id === 'fc_2'), { id: 'fc_2', type: 'function_call', call_id: 'call_2', name: 'lookup', arguments: '{"q":"x"}', status: 'completed' }, 'items whole')

  const asc = await list('?order=asc&include=reasoning.encrypted_content')
  t.same(asc.data.map(i => i.id), all)

  // Paging asc two at a time, following last_id.
  const seen: string[] = []
  let after = ''
  for (;;) {
    const page = await list(`?order=asc&limit=2${after ? `&after=${after}` : ''}`)
    seen.push(...page.data.map(i => i.id))
    t.ok(page.data.length <= 2)
    if (!page.has_more) break
    after = page.last_id!
  }
  t.same(seen, all, 'the pages add up to the list')

  const lastPage = await list('?after=msg_in_resp_2')
  t.same(lastPage.data.map(i => i.id), ['msg_out_resp_1', 'msg_in_resp_1'], 'after in desc order')
  const empty = await list('?order=asc&after=msg_in_resp_3')
  t.same(empty, { object: 'list', data: [], first_id: null, last_id: null, has_more: false })

  const limit100 = await list('?limit=100')
  t.equal(limit100.data.length, all.length)
})

t.test('input_items refuses a bad limit, order or after, naming the parameter', async t => {
  const { app, auth, store, account } = await setup(t)
  await store.save(turn(account.id, 'resp_1', null))
  for (const [query, param] of [
    ['limit=0', 'limit'], ['limit=101', 'limit'], ['limit=abc', 'limit'], ['limit=1.5', 'limit'], ['limit=-1', 'limit'], ['limit=' + '9'.repeat(400), 'limit'],
    ['order=up', 'order'], ['order=', 'order'],
    ['after=msg_nowhere', 'after'],
  ]) {
    const res = await app.inject({ method: 'GET', url: `/api/v1/responses/resp_1/input_items?${query}`, headers: auth })
    t.equal(res.statusCode, 400, query)
    t.match(res.json(), { error: { type: 'invalid_request_error', code: 'invalid_parameter', param } }, query)
  }
})

t.test('deleting a response in the middle: later responses stay, their conversation stops at the gap', async t => {
  const { app, auth, store, account } = await setup(t)
  await store.save(turn(account.id, 'resp_1', null))
  await store.save(turn(account.id, 'resp_2', 'resp_1'))
  await store.save(turn(account.id, 'resp_3', 'resp_2'))
  t.equal((await app.inject({ method: 'DELETE', url: '/api/v1/responses/resp_2', headers: auth })).statusCode, 200)
  t.equal((await app.inject({ method: 'GET', url: '/api/v1/responses/resp_3', headers: auth })).statusCode, 200)
  const items = await app.inject({ method: 'GET', url: '/api/v1/responses/resp_3/input_items', headers: auth })
  t.same(items.json().data.map((i: { id: string }) => i.id), ['msg_in_resp_3'])
  t.equal(await store.chain(account.id, 'resp_3'), undefined, 'continuing it is not found (the door answers 404 for previous_response_id)')
})

t.test('the app\'s settings bound what is stored: RESPONSES_MAX_PER_ACCOUNT evicts the oldest', async t => {
  const { app, auth, store, account } = await setup(t, { RESPONSES_MAX_PER_ACCOUNT: '2', RESPONSES_MAX_BYTES: '2048' })
  for (const id of ['resp_1', 'resp_2', 'resp_3']) await store.save(turn(account.id, id, null))
  t.equal((await app.inject({ method: 'GET', url: '/api/v1/responses/resp_1', headers: auth })).statusCode, 404, 'evicted')
  t.equal((await app.inject({ method: 'GET', url: '/api/v1/responses/resp_3', headers: auth })).statusCode, 200)
  await store.save({ ...turn(account.id, 'resp_big', null), input: [{ id: 'msg_big', type: 'message', role: 'user', content: [{ type: 'input_text', text: 'z'.repeat(3000) }] }] })
  t.equal((await app.inject({ method: 'GET', url: '/api/v1/responses/resp_big', headers: auth })).statusCode, 404, 'over RESPONSES_MAX_BYTES: not stored')
  t.equal((await app.inject({ method: 'GET', url: '/api/v1/responses/resp_2', headers: auth })).statusCode, 200, 'and it evicted nothing')
})

t.test('settings: RESPONSES_* are read and checked by name', async t => {
  const config = loadConfig({ RESPONSES_RETENTION_DAYS: '7', RESPONSES_MAX_PER_ACCOUNT: '0', RESPONSES_MAX_BYTES: '65536', RESPONSES_MAX_CONVERSATION_BYTES: '1048576' })
  t.same(config.storedResponses, { retentionDays: 7, maxPerAccount: 0, maxBytes: 65536, maxConversationBytes: 1048576 })
  t.same(loadConfig({}).storedResponses, { retentionDays: 30, maxPerAccount: 10000, maxBytes: 4194304, maxConversationBytes: 16777216 })
  t.throws(() => loadConfig({ RESPONSES_RETENTION_DAYS: '-1' }), /RESPONSES_RETENTION_DAYS/)
  t.throws(() => loadConfig({ RESPONSES_MAX_BYTES: '10' }), /RESPONSES_MAX_BYTES/)
  t.throws(() => loadConfig({ RESPONSES_MAX_PER_ACCOUNT: 'many' }), /RESPONSES_MAX_PER_ACCOUNT: must be a whole number/)
})

/** An app over the database at `where`, as the server builds one; closed (not the database) by the caller. */
async function appOver (where: NonNullable<Awaited<ReturnType<typeof testDatabase>>>, url: string) {
  const db = await openMigratedDatabase(where)
  const config = loadConfig({ DATABASE_URL: url, LOG_LEVEL: 'silent', REFUSED_PER_KEY_PER_MINUTE: '0', REFUSED_PER_ADDRESS_PER_MINUTE: '0' })
  const accounts = new Accounts(db)
  const app = await buildApp({ config, accounts, models: new ModelRegistry([]), logger: false })
  return { db, accounts, app }
}

async function survivesRestart (t: Test, kind: DatabaseKind): Promise<void> {
  const where = await testDatabase(t, kind)
  if (where === undefined) return
  const url = where.kind === 'sqlite' ? `sqlite://${where.path}` : where.url
  const first = await appOver(where, url)
  const owner = await first.accounts.create({ email: 'owner@example.com', tier: 'unlimited' })
  const { key } = await first.accounts.createKey(owner.id, { name: 'k' })
  const headers = { authorization: `Bearer ${key}` }
  const record = turn(owner.id, 'resp_kept', null)
  await new StoredResponses(first.db).save(record)
  await new StoredResponses(first.db).save(turn(owner.id, 'resp_next', 'resp_kept'))
  t.equal((await first.app.inject({ method: 'GET', url: '/api/v1/responses/resp_kept', headers })).body, JSON.stringify(record.response))
  await first.app.close()
  await first.db.destroy()

  const second = await appOver(where, url)
  t.teardown(async () => {
    await second.app.close()
    await second.db.destroy()
  })
  const got = await second.app.inject({ method: 'GET', url: '/api/v1/responses/resp_kept', headers })
  t.equal(got.statusCode, 200)
  t.equal(got.body, JSON.stringify(record.response), 'the same response after the restart')
  const items = await second.app.inject({ method: 'GET', url: '/api/v1/responses/resp_next/input_items?order=asc', headers })
  t.same(items.json().data.map((i: { id: string }) => i.id), ['msg_in_resp_kept', 'msg_out_resp_kept', 'msg_in_resp_next'])
  t.same(ids(await new StoredResponses(second.db).chain(owner.id, 'resp_next')), ['msg_in_resp_kept', 'msg_out_resp_kept', 'msg_in_resp_next', 'msg_out_resp_next'], 'and the conversation continues')
}

function ids (items: Array<Record<string, unknown>> | undefined): unknown[] | undefined {
  return items?.map(item => item.id)
}

t.test('a rebuilt app on the same database reads what the previous one stored [sqlite]', t => survivesRestart(t, 'sqlite'))
t.test('a rebuilt app on the same database reads what the previous one stored [postgres]', t => survivesRestart(t, 'postgres'))

t.test('what is stored of the input is what the prompt holds: a client\'s own fields and sent-back thinking are not kept', async t => {
  const { app, auth, db } = await setup(t)
  const junk = 'z'.repeat(100_000)
  const res = await app.inject({
    method: 'POST',
    url: '/api/v1/responses',
    headers: auth,
    payload: {
      model: 'scripted',
      input: [
        { role: 'user', content: [{ type: 'input_text', text: 'Hello', padding: junk }], padding: junk },
        { type: 'reasoning', id: 'rs_1', summary: [{ type: 'summary_text', text: junk }], encrypted_content: junk, content: [{ type: 'reasoning_text', text: junk }] },
        { role: 'assistant', content: 'Hi', extra: { deep: junk } },
        { role: 'user', content: 'Again' },
      ],
    },
  })
  t.equal(res.statusCode, 200, res.body)
  const items = await app.inject({ url: `/api/v1/responses/${res.json().id}/input_items?order=asc`, headers: auth })
  t.same(items.json().data.map((item: Record<string, unknown>) => Object.keys(item).sort()), [
    ['content', 'id', 'role', 'type'], ['id', 'summary', 'type'], ['content', 'id', 'role', 'type'], ['content', 'id', 'role', 'type'],
  ])
  t.same(items.json().data[0].content, [{ type: 'input_text', text: 'Hello' }], 'a part keeps its known fields only')
  t.same(items.json().data[1], { type: 'reasoning', id: 'rs_1', summary: [] }, 'a reasoning item is kept by its id')
  const row = await db.selectFrom('stored_responses').select('bytes').executeTakeFirstOrThrow()
  t.ok(Number(row.bytes) < 5000, `stored ${row.bytes} bytes of a 700 KB body`)
})

t.test('DELETE with a JSON content type and no body (as some clients send it) deletes, and is no refusal', async t => {
  const { app, auth, store, account } = await setup(t)
  await store.save(turn(account.id, 'resp_del', null))
  const res = await app.inject({ method: 'DELETE', url: '/api/v1/responses/resp_del', headers: { ...auth, 'content-type': 'application/json' } })
  t.equal(res.statusCode, 200, res.body)
  t.same(res.json(), { id: 'resp_del', object: 'response.deleted', deleted: true })
  const broken = await app.inject({ method: 'DELETE', url: '/api/v1/responses/resp_del', headers: { ...auth, 'content-type': 'application/json' }, payload: '{' })
  t.equal(broken.statusCode, 400, 'a body that is there is still parsed')
})
