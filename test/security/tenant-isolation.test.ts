// Tenant isolation on every route the app registers. ROUTES below is the
// explicit table of each route's access rule and of the check that proves one
// account can never see or act on another's keys, usage or settings through
// it. The app's routes are collected as it registers them (buildApp's
// onRoute), so a route added without a row here fails the first test, and a
// row whose route is gone fails it too.
//
// The world: Ann and Bob registered on the dashboard and each made a key
// there; Ann made 2 chat completions, Bob 3 (different counts, so mixed-up
// usage shows); Root is an admin.

import t, { type Test } from 'tap'
import type { LightMyRequestResponse } from 'fastify'
import { apiKeyPrefix } from '../../src/accounts/api-key-format.ts'
import { StoredResponses } from '../../src/responses/stored-responses.ts'
import { buildTestApp, chatBody, type TestApp } from '../helpers/app.ts'
import { Browser, csrfToken } from '../dashboard/jar.ts'
import { dashboardKey, loggedIn, signedUp } from './people.ts'

const TIERS = JSON.stringify({ default: 'free', tiers: { free: { requests_per_minute: 100, calls_per_month: 100 }, pro: { requests_per_minute: 1000 }, unlimited: {} } })

interface Person {
  email: string
  password: string
  id: number
  browser: Browser
  key: string
  prefix: string
}

interface World extends TestApp {
  ann: Person
  bob: Person
  root: Person
}

/** Who may use a route: anyone; a Bearer key; a dashboard session; an admin's session. */
type Access = 'public' | 'key' | 'session' | 'admin'

interface Rule {
  access: Access
  /** A concrete URL for a pattern with parameters or a wildcard. */
  sample?: string
  /** A public route's status for an anonymous caller who sends nothing else (200 unless said). */
  anonymous?: number
  /** Proves the route keeps accounts apart (or that it shows no account's data at all). */
  check: (t: Test, w: World) => Promise<void>
  /** The route's errors are in Anthropic's shape ({"type":"error","error":{"type","message"}}). */
  anthropic?: boolean
}

// ---------------------------------------------------------------------------
// Reusable checks

/** Every email, key prefix and key of the world: what a response without account data must not contain. */
function accountData (w: World): string[] {
  return [w.ann, w.bob, w.root].flatMap(p => [p.email, p.prefix, p.key])
}

function showsNone (t: Test, label: string, res: LightMyRequestResponse, secrets: string[]): void {
  const text = res.body + JSON.stringify(res.headers)
  for (const s of secrets) t.notOk(text.includes(s), `${label} does not show ${s}`)
}

/** A route that is not about any account: the same for everyone, and no account's data in it, whoever asks. */
function noAccountData (url: string) {
  return async (t: Test, w: World): Promise<void> => {
    const anonymous = await w.app.inject({ url })
    t.ok(anonymous.statusCode < 400, `${url}: answers anonymously (${anonymous.statusCode})`)
    showsNone(t, `${url} (anonymous)`, anonymous, accountData(w))
    const asAnn = await w.app.inject({ url, headers: { authorization: `Bearer ${w.ann.key}`, cookie: cookieOf(w.ann.browser) } })
    showsNone(t, `${url} (as Ann)`, asAnn, [w.bob.email, w.bob.prefix, w.root.email, w.root.prefix])
  }
}

/** An API route with no account data: a key is needed, and the answer names no account. */
function keyedNoAccountData (url: string) {
  return async (t: Test, w: World): Promise<void> => {
    const res = await w.app.inject({ url, headers: { authorization: `Bearer ${w.ann.key}` } })
    t.equal(res.statusCode, 200, url)
    showsNone(t, `${url} (as Ann)`, res, accountData(w))
  }
}

const cookieOf = (browser: Browser): string => [...browser.cookies].map(([k, v]) => `${k}=${v}`).join('; ')
const bearer = (key: string) => ({ authorization: `Bearer ${key}` })

// ---------------------------------------------------------------------------
// The table

const ROUTES: Record<string, Rule> = {
  // Operations and docs: no account data at all.
  'GET /healthz': { access: 'public', check: noAccountData('/healthz') },
  'GET /readyz': { access: 'public', check: noAccountData('/readyz') },
  'GET /metrics': { access: 'public', check: noAccountData('/metrics') },
  'GET /docs': { access: 'public', check: noAccountData('/docs') },
  'GET /docs/static/index.html': { access: 'public', anonymous: 302, check: noAccountData('/docs/static/index.html') }, // swagger-ui sends it to /docs/
  'GET /docs/static/swagger-initializer.js': { access: 'public', check: noAccountData('/docs/static/swagger-initializer.js') },
  'GET /docs/static/*': { access: 'public', sample: '/docs/static/swagger-ui.css', check: noAccountData('/docs/static/swagger-ui.css') },
  'GET /docs/json': { access: 'public', check: noAccountData('/docs/json') },
  'GET /docs/yaml': { access: 'public', check: noAccountData('/docs/yaml') },
  'GET /api/assets/*': { access: 'public', sample: '/api/assets/copy.js', check: noAccountData('/api/assets/copy.js') },

  // The API, behind keys.
  'POST /api/v1/chat/completions': {
    access: 'key',
    async check (t, w) {
      // Usage is attributed to the key's account, whatever the body says about the user.
      const claimed = await w.app.inject({ method: 'POST', url: '/api/v1/chat/completions', headers: bearer(w.ann.key), payload: chatBody({ user: w.bob.email }) })
      t.equal(claimed.statusCode, 200)
      const rows = await w.db.selectFrom('usage_records').select(['account_id', 'key_prefix']).execute()
      const annRows = rows.filter(r => r.account_id === w.ann.id)
      const bobRows = rows.filter(r => r.account_id === w.bob.id)
      t.equal(annRows.length, 3, 'Ann\'s 2 calls and the one naming Bob are Ann\'s')
      t.equal(bobRows.length, 3, 'Bob\'s 3 calls are Bob\'s')
      t.ok(annRows.every(r => r.key_prefix === w.ann.prefix), 'every row of Ann\'s names Ann\'s key')
      t.ok(bobRows.every(r => r.key_prefix === w.bob.prefix), 'every row of Bob\'s names Bob\'s key')
      t.equal(rows.length, 6, 'no row belongs to anyone else')
      t.notMatch(claimed.body, w.bob.prefix, 'the reply names no other account')
    },
  },
  'POST /api/v1/messages': {
    access: 'key',
    anthropic: true,
    async check (t, w) {
      // The Messages door: usage is the key's account's, whatever metadata.user_id claims; the key may come in x-api-key.
      const before = await w.db.selectFrom('usage_records').select('account_id').execute()
      const res = await w.app.inject({ method: 'POST', url: '/api/v1/messages', headers: { 'x-api-key': w.ann.key }, payload: { model: 'scripted', max_tokens: 8, metadata: { user_id: w.bob.email }, messages: [{ role: 'user', content: 'hi' }] } })
      t.equal(res.statusCode, 200)
      const rows = await w.db.selectFrom('usage_records').select(['account_id', 'key_prefix']).execute()
      t.equal(rows.length, before.length + 1)
      t.same(rows.at(-1), { account_id: w.ann.id, key_prefix: w.ann.prefix }, 'the row is Ann\'s')
      t.notMatch(res.body, w.bob.prefix)
    },
  },
  'POST /api/v1/messages/count_tokens': {
    access: 'key',
    anthropic: true,
    async check (t, w) {
      const before = (await w.db.selectFrom('usage_records').select('id').execute()).length
      const res = await w.app.inject({ method: 'POST', url: '/api/v1/messages/count_tokens', headers: bearer(w.ann.key), payload: { model: 'scripted', messages: [{ role: 'user', content: w.bob.email }] } })
      t.equal(res.statusCode, 200)
      t.same(Object.keys(res.json()), ['input_tokens'], 'a count and nothing about any account')
      t.equal((await w.db.selectFrom('usage_records').select('id').execute()).length, before, 'no usage row')
    },
  },
  'GET /api/v1/models': { access: 'key', check: keyedNoAccountData('/api/v1/models') },
  'GET /api/v1/models/:id': { access: 'key', sample: '/api/v1/models/scripted', check: keyedNoAccountData('/api/v1/models/scripted') },
  'GET /api/v1/usage': {
    access: 'key',
    async check (t, w) {
      const calls = async (person: Person) => (await w.db.selectFrom('usage_records').select('id').where('account_id', '=', person.id).execute()).length
      for (const [me, other] of [[w.ann, w.bob], [w.bob, w.ann]] as const) {
        const res = await w.app.inject({ url: '/api/v1/usage', headers: bearer(me.key) })
        t.equal(res.statusCode, 200)
        const report = res.json()
        t.equal(report.account.email, me.email, `${me.email} gets their own report`)
        const mine = await calls(me)
        t.equal(report.used.calls_this_month, mine, `${me.email}: this month's calls are their own (${mine})`)
        t.equal(report.daily.reduce((n: number, d: { calls: number }) => n + d.calls, 0), mine, `${me.email}: so are the daily rows`)
        showsNone(t, `${me.email}'s usage`, res, [other.email, other.prefix])
      }
    },
  },

  'GET /api/v1/responses/:response_id': {
    access: 'key',
    sample: '/api/v1/responses/resp_sample',
    async check (t, w) {
      await storeTurns(w)
      for (const [me, other] of [[w.ann, w.bob], [w.bob, w.ann]] as const) {
        const own = await w.app.inject({ url: `/api/v1/responses/resp_${me.id}`, headers: bearer(me.key) })
        t.equal(own.statusCode, 200, `${me.email} reads their own response`)
        t.equal(own.json().id, `resp_${me.id}`)
        const theirs = await w.app.inject({ url: `/api/v1/responses/resp_${other.id}`, headers: bearer(me.key) })
        t.equal(theirs.statusCode, 404, `${me.email} cannot read ${other.email}'s`)
        showsNone(t, 'the refusal', theirs, [other.email, other.prefix, `secret of ${other.id}`])
      }
    },
  },
  'GET /api/v1/responses/:response_id/input_items': {
    access: 'key',
    sample: '/api/v1/responses/resp_sample/input_items',
    async check (t, w) {
      await storeTurns(w)
      const own = await w.app.inject({ url: `/api/v1/responses/resp_${w.ann.id}/input_items`, headers: bearer(w.ann.key) })
      t.equal(own.statusCode, 200)
      t.match(own.body, `secret of ${w.ann.id}`, 'Ann lists her own input')
      const theirs = await w.app.inject({ url: `/api/v1/responses/resp_${w.bob.id}/input_items`, headers: bearer(w.ann.key) })
      t.equal(theirs.statusCode, 404, 'not Bob\'s')
      showsNone(t, 'the refusal', theirs, [`secret of ${w.bob.id}`])
    },
  },
  'DELETE /api/v1/responses/:response_id': {
    access: 'key',
    sample: '/api/v1/responses/resp_sample',
    async check (t, w) {
      await storeTurns(w)
      const theirs = await w.app.inject({ method: 'DELETE', url: `/api/v1/responses/resp_${w.bob.id}`, headers: bearer(w.ann.key) })
      t.equal(theirs.statusCode, 404, 'Ann cannot delete Bob\'s response')
      t.equal((await w.app.inject({ url: `/api/v1/responses/resp_${w.bob.id}`, headers: bearer(w.bob.key) })).statusCode, 200, 'it is still Bob\'s')
      const own = await w.app.inject({ method: 'DELETE', url: `/api/v1/responses/resp_${w.ann.id}`, headers: bearer(w.ann.key) })
      t.equal(own.statusCode, 200, 'her own she can')
    },
  },
  // Public dashboard forms: anyone may use them, and they only ever act on the account whose password is given.
  'POST /api/v1/responses': {
    access: 'key',
    async check (t, w) {
      // The Responses door meters like chat completions: the key's account, whatever the body says.
      const res = await w.app.inject({ method: 'POST', url: '/api/v1/responses', headers: bearer(w.ann.key), payload: { model: 'scripted', input: 'Hi', user: w.bob.email, safety_identifier: w.bob.prefix } })
      t.equal(res.statusCode, 200)
      const row = await w.db.selectFrom('usage_records').select(['account_id', 'key_prefix']).where('request_id', '=', res.json().id).executeTakeFirst()
      t.same(row, { account_id: w.ann.id, key_prefix: w.ann.prefix }, 'the row is Ann\'s, under the response id')
    },
  },
  'GET /api/login': { access: 'public', check: noAccountData('/api/login') },
  'POST /api/login': {
    access: 'public',
    anonymous: 401, // the form, again, saying the (empty) credentials match no account
    async check (t, w) {
      const browser = new Browser(w.app)
      const wrong = await browser.post('/api/login', { email: w.bob.email, password: w.ann.password }, { csrfFrom: '/api/login' })
      t.equal(wrong.statusCode, 401, 'Ann\'s password does not open Bob\'s account')
      showsNone(t, 'the refused log-in', wrong, [w.bob.prefix, w.ann.prefix])
      const right = await browser.post('/api/login', { email: w.ann.email, password: w.ann.password }, { csrfFrom: '/api/login' })
      t.equal(right.statusCode, 303)
      const home = await browser.get('/api')
      t.match(home.body, w.ann.email)
      showsNone(t, 'Ann\'s dashboard after log-in', home, [w.bob.email, w.bob.prefix])
    },
  },
  'GET /api/register': { access: 'public', check: noAccountData('/api/register') },
  'POST /api/register': {
    access: 'public',
    anonymous: 400, // the form, again, asking for an email and password
    async check (t, w) {
      const browser = new Browser(w.app)
      const res = await browser.post('/api/register', { email: w.bob.email.toUpperCase(), password: 'taken over!', confirm: 'taken over!' }, { csrfFrom: '/api/register' })
      t.equal(res.statusCode, 409, 'registering Bob\'s email again is refused')
      t.notOk(browser.cookies.has('chatd_session'), 'and logs nobody in')
      t.ok(await w.accounts.verifyLogin(w.bob.email, w.bob.password), 'Bob\'s password is unchanged')
      t.notOk(await w.accounts.verifyLogin(w.bob.email, 'taken over!'))
    },
  },
  'POST /api/logout': {
    access: 'public',
    anonymous: 303, // to the log-in page: there was nothing to end
    async check (t, w) {
      const second = await loggedIn(w.app, w.ann.email, w.ann.password)
      t.equal((await second.post('/api/logout', {}, { csrfFrom: '/api' })).statusCode, 303)
      t.equal((await second.get('/api')).statusCode, 303, 'that session ended')
      t.equal((await w.ann.browser.get('/api')).statusCode, 200, 'Ann\'s other session did not')
      t.equal((await w.bob.browser.get('/api')).statusCode, 200, 'nor did Bob\'s')
    },
  },

  // The dashboard proper: the logged-in account's own data only.
  'GET /api': {
    access: 'session',
    async check (t, w) {
      for (const [me, other] of [[w.ann, w.bob], [w.bob, w.ann]] as const) {
        const page = await me.browser.get('/api')
        t.equal(page.statusCode, 200)
        t.match(page.body, me.email)
        t.match(page.body, `${me.prefix}…`, `${me.email} sees their key`)
        showsNone(t, `${me.email}'s dashboard`, page, [other.email, other.prefix, w.root.email, w.root.prefix])
        const recent = /<table id="recent">([\s\S]*?)<\/table>/.exec(page.body)?.[1] ?? ''
        const rows = (recent.match(/<tr>/g) ?? []).length - 1 // less the header row
        const mine = (await w.db.selectFrom('usage_records').select('id').where('account_id', '=', me.id).execute()).length
        t.equal(rows, Math.min(mine, 10), `${me.email}'s recent requests are their own`)
      }
    },
  },
  'GET /api/password': {
    access: 'session',
    async check (t, w) {
      const page = await w.ann.browser.get('/api/password')
      t.equal(page.statusCode, 200)
      showsNone(t, 'Ann\'s password page', page, [w.bob.email, w.bob.prefix])
    },
  },
  'POST /api/password': {
    access: 'session',
    async check (t, w) {
      const bobHash = await passwordHash(w, w.bob.id)
      const next = 'ann new password'
      // The form has no account field; extra ones naming Bob are ignored.
      const res = await w.ann.browser.post('/api/password', { current: w.ann.password, new: next, confirm: next, email: w.bob.email, account: String(w.bob.id) }, { csrfFrom: '/api/password' })
      t.equal(res.statusCode, 303)
      w.ann.password = next
      t.ok(await w.accounts.verifyLogin(w.ann.email, next), 'Ann\'s password changed')
      t.equal(await passwordHash(w, w.bob.id), bobHash, 'Bob\'s did not')
      t.equal((await w.bob.browser.get('/api')).statusCode, 200, 'and Bob\'s session lives on')
    },
  },
  'GET /api/delete-account': {
    access: 'session',
    async check (t, w) {
      const page = await w.ann.browser.get('/api/delete-account')
      t.equal(page.statusCode, 200)
      t.match(page.body, w.ann.email)
      showsNone(t, 'Ann\'s delete-account page', page, [w.bob.email, w.bob.prefix])
    },
  },
  'POST /api/delete-account': {
    access: 'session',
    async check (t, w) {
      // Carl, made for this check, deletes his account; the form has no account field, and extra
      // ones naming Bob are ignored: Bob keeps his account, key and session.
      const carl = await signedUp(w.app, 'carl@example.com', 'carl password')
      const res = await carl.post('/api/delete-account', { password: 'carl password', confirm: 'yes', email: w.bob.email, account: String(w.bob.id) }, { csrfFrom: '/api/delete-account' })
      t.equal(res.statusCode, 303)
      t.equal(await w.accounts.findByEmail('carl@example.com'), undefined, 'Carl\'s account is gone')
      t.ok(await w.accounts.findById(w.bob.id), 'Bob\'s is not')
      t.match(await w.accounts.authenticate(w.bob.key), { ok: true, account: { id: w.bob.id } })
      t.equal((await w.bob.browser.get('/api')).statusCode, 200, 'and Bob\'s session lives on')
      // With Bob's password in Ann's session, nothing is deleted: the password is checked against the session's account.
      const wrong = await w.ann.browser.post('/api/delete-account', { password: w.bob.password, confirm: 'yes', email: w.bob.email }, { csrfFrom: '/api/delete-account' })
      t.equal(wrong.statusCode, 401)
      t.ok(await w.accounts.findById(w.bob.id) && await w.accounts.findById(w.ann.id), 'both still there')
    },
  },
  'POST /api/keys': {
    access: 'session',
    async check (t, w) {
      const bobKeys = await w.accounts.listKeys(w.bob.id)
      const res = await w.ann.browser.post('/api/keys', { name: 'for bob?', account: String(w.bob.id), email: w.bob.email }, { csrfFrom: '/api' })
      t.equal(res.statusCode, 201)
      const key = /<code id="new-key" class="key">(sk-chatd-[A-Za-z0-9]{32})<\/code>/.exec(res.body)![1]
      t.match(await w.accounts.authenticate(key), { ok: true, account: { id: w.ann.id } }, 'the key is Ann\'s')
      t.same(await w.accounts.listKeys(w.bob.id), bobKeys, 'Bob\'s keys are unchanged')
    },
  },
  'POST /api/keys/revoke': {
    access: 'session',
    async check (t, w) {
      const res = await w.ann.browser.post('/api/keys/revoke', { prefix: w.bob.prefix, account: String(w.bob.id) }, { csrfFrom: '/api' })
      t.equal(res.statusCode, 404, 'Ann cannot revoke Bob\'s key by its prefix')
      showsNone(t, 'the refusal', res, [w.bob.email])
      t.equal((await w.app.inject({ url: '/api/v1/models', headers: bearer(w.bob.key) })).statusCode, 200, 'Bob\'s key still works')
      t.ok((await w.accounts.listKeys(w.bob.id)).every(k => k.revokedAt === null), 'and is not marked revoked')
      // The same form revokes Ann's own key.
      const own = await dashboardKey(w.ann.browser, 'to revoke')
      t.equal((await w.ann.browser.post('/api/keys/revoke', { prefix: apiKeyPrefix(own) }, { csrfFrom: '/api' })).statusCode, 303)
      t.equal((await w.app.inject({ url: '/api/v1/models', headers: bearer(own) })).statusCode, 401, 'her own key is revoked')
    },
  },

  // Admin pages: admins only.
  'GET /api/admin': {
    access: 'admin',
    async check (t, w) {
      const refused = await w.ann.browser.get('/api/admin')
      t.equal(refused.statusCode, 403, 'a user gets 403')
      showsNone(t, 'the refusal', refused, [w.bob.email, w.root.email])
      const page = await w.root.browser.get('/api/admin')
      t.equal(page.statusCode, 200)
      for (const p of [w.ann, w.bob]) t.match(page.body, p.email, `the admin sees ${p.email}`)
      showsNone(t, 'the admin page', page, [w.ann.prefix, w.bob.prefix, w.ann.key, w.bob.key])
    },
  },
  'GET /api/admin/delete': {
    access: 'admin',
    sample: '/api/admin/delete?account=1',
    async check (t, w) {
      const refused = await w.ann.browser.get(`/api/admin/delete?account=${w.bob.id}`)
      t.equal(refused.statusCode, 403, 'a user gets 403')
      showsNone(t, 'the refusal', refused, [w.bob.email])
      const page = await w.root.browser.get(`/api/admin/delete?account=${w.bob.id}`)
      t.equal(page.statusCode, 200)
      t.match(page.body, w.bob.email, 'the admin sees whom it would delete')
      showsNone(t, 'the confirmation', page, [w.bob.prefix, w.bob.key, w.ann.email])
    },
  },
  'POST /api/admin/delete': {
    access: 'admin',
    async check (t, w) {
      for (const target of [w.bob, w.ann]) {
        const res = await w.ann.browser.post('/api/admin/delete', { account: String(target.id), confirm: 'yes' }, { csrfFrom: '/api' })
        t.equal(res.statusCode, 403, `a user cannot delete ${target === w.ann ? 'her own account here' : 'another account'}`)
        t.ok(await w.accounts.findById(target.id))
      }
      // Dan, made for this check, is deleted by the admin; Ann and Bob are not.
      await signedUp(w.app, 'dan@example.com', 'dan password')
      const dan = (await w.accounts.findByEmail('dan@example.com'))!
      const res = await w.root.browser.post('/api/admin/delete', { account: String(dan.id), confirm: 'yes' }, { csrfFrom: '/api/admin' })
      t.equal(res.statusCode, 303, 'the admin can')
      t.equal(await w.accounts.findById(dan.id), undefined)
      t.ok(await w.accounts.findById(w.ann.id) && await w.accounts.findById(w.bob.id), 'and deletes only the account named')
    },
  },
  'POST /api/admin/tier': {
    access: 'admin',
    async check (t, w) {
      for (const target of [w.bob, w.ann]) {
        const res = await w.ann.browser.post('/api/admin/tier', { account: String(target.id), tier: 'unlimited' }, { csrfFrom: '/api' })
        t.equal(res.statusCode, 403, `a user cannot set ${target === w.ann ? 'her own' : 'another account\'s'} tier`)
        t.equal((await w.accounts.findById(target.id))!.tier, 'free')
      }
      const res = await w.root.browser.post('/api/admin/tier', { account: String(w.bob.id), tier: 'pro' }, { csrfFrom: '/api/admin' })
      t.equal(res.statusCode, 303, 'the admin can')
      t.equal((await w.accounts.findById(w.bob.id))!.tier, 'pro')
      t.equal((await w.accounts.findById(w.ann.id))!.tier, 'free', 'and changes only the account named')
    },
  },
}

/** One stored response each for Ann and Bob (resp_<account id>), its input naming a secret of theirs; again is a no-op. */
async function storeTurns (w: World): Promise<void> {
  const store = new StoredResponses(w.db)
  for (const p of [w.ann, w.bob]) {
    await store.save({
      id: `resp_${p.id}`,
      accountId: p.id,
      previousResponseId: null,
      model: 'scripted',
      createdAt: 0,
      response: { id: `resp_${p.id}`, object: 'response', output: [] },
      input: [{ id: `msg_${p.id}`, type: 'message', role: 'user', content: [{ type: 'input_text', text: `secret of ${p.id}` }] }],
    })
  }
}

async function passwordHash (w: World, id: number): Promise<string | null> {
  return (await w.db.selectFrom('accounts').select('password_hash').where('id', '=', id).executeTakeFirstOrThrow()).password_hash
}

// ---------------------------------------------------------------------------

/** `METHOD url` for every route the app registers; HEAD routes are GET's handler and answer to GET's row. */
async function worldWithRoutes (t: Test): Promise<{ w: World; routes: Set<string>; heads: Set<string> }> {
  const routes = new Set<string>()
  const heads = new Set<string>()
  const app = await buildTestApp(t, {
    tiers: TIERS,
    onRoute: route => {
      for (const method of [route.method].flat()) (method === 'HEAD' ? heads : routes).add(`${method} ${route.url}`)
    },
  })
  const person = async (email: string, password: string): Promise<Person> => {
    const browser = await signedUp(app.app, email, password)
    const key = await dashboardKey(browser, 'main')
    return { email, password, browser, key, prefix: apiKeyPrefix(key), id: (await app.accounts.findByEmail(email))!.id }
  }
  const ann = await person('ann@example.com', 'ann password')
  const bob = await person('bob@example.com', 'bob password')
  const rootAccount = await app.accounts.create({ email: 'root@example.com', isAdmin: true, tier: 'unlimited' })
  await app.accounts.setPassword(rootAccount.id, 'root password')
  const rootBrowser = await loggedIn(app.app, 'root@example.com', 'root password')
  const root: Person = { email: 'root@example.com', password: 'root password', browser: rootBrowser, key: await dashboardKey(rootBrowser, 'root'), prefix: '', id: rootAccount.id }
  root.prefix = apiKeyPrefix(root.key)
  for (const [person, n] of [[ann, 2], [bob, 3]] as const) {
    for (let i = 0; i < n; i++) {
      const res = await app.app.inject({ method: 'POST', url: '/api/v1/chat/completions', headers: bearer(person.key), payload: chatBody() })
      if (res.statusCode !== 200) throw new Error(`setup call failed: ${res.statusCode} ${res.body}`)
    }
  }
  return { w: { ...app, ann, bob, root }, routes, heads }
}

t.test('every route the app registers has a row in the table, and every row a route', async t => {
  const { routes, heads } = await worldWithRoutes(t)
  const table = new Set(Object.keys(ROUTES))
  t.same([...routes].filter(r => !table.has(r)), [], 'routes without an access rule (add them to ROUTES with a check)')
  t.same([...table].filter(r => !routes.has(r)), [], 'rows for routes the app no longer has')
  const unmatchedHeads = [...heads].filter(h => {
    const url = h.slice('HEAD '.length)
    return !routes.has(`GET ${url}`) && !routes.has(`GET ${url.replace(/\/$/, '')}`)
  })
  t.same(unmatchedHeads, [], 'every HEAD route is a GET route\'s')
  t.ok(routes.size >= 25, `${routes.size} routes`)
})

t.test('anonymous callers: 401 on the API, sent to log in on the dashboard, let through only where public', async t => {
  const { w } = await worldWithRoutes(t)
  // A valid token for an anonymous visitor, so a refusal below is the access rule's and not CSRF's.
  const visitor = new Browser(w.app)
  const anonymousToken = csrfToken((await visitor.get('/api/login')).body)
  const cookie = `chatd_csrf=${visitor.cookies.get('chatd_csrf')}`
  const accountsBefore = await w.accounts.count()
  for (const [route, rule] of Object.entries(ROUTES)) {
    const [method, pattern] = route.split(' ') as ['GET' | 'POST', string]
    const url = rule.sample ?? pattern
    const res = method === 'GET'
      ? await w.app.inject({ url })
      : await w.app.inject({ method, url, headers: { cookie, 'content-type': 'application/x-www-form-urlencoded' }, payload: new URLSearchParams({ _csrf: anonymousToken }).toString() })
    if (rule.access === 'key') {
      t.equal(res.statusCode, 401, `${route}: 401`)
      if (rule.anthropic) t.equal(res.json().error.type, 'authentication_error', `${route}: authentication_error`)
      else t.equal(res.json().error.code, 'missing_api_key', `${route}: missing_api_key`)
    } else if (rule.access === 'session' || rule.access === 'admin') {
      t.equal(res.statusCode, 303, `${route}: redirected`)
      t.equal(res.headers.location, '/api/login', `${route}: to the log-in page`)
    } else {
      t.equal(res.statusCode, rule.anonymous ?? 200, `${route}: open to anonymous callers`)
    }
    if (method === 'GET') {
      const head = await w.app.inject({ method: 'HEAD', url })
      t.equal(head.statusCode, res.statusCode, `HEAD ${url}: the same answer as GET`)
    }
  }
  t.equal(await w.accounts.count(), accountsBefore, 'no anonymous post made an account')
  t.equal((await w.accounts.listKeys(w.ann.id)).length, 1, 'or a key')
})

t.test('credentials of the wrong kind get nowhere: a session cookie on the API, an API key on the dashboard', async t => {
  const { w } = await worldWithRoutes(t)
  for (const [route, rule] of Object.entries(ROUTES)) {
    if (rule.access !== 'key') continue
    const [method, pattern] = route.split(' ')
    const res = await w.app.inject({ method: method as 'GET', url: rule.sample ?? pattern, headers: { cookie: cookieOf(w.ann.browser) }, ...(method === 'POST' ? { payload: chatBody() } : {}) })
    t.equal(res.statusCode, 401, `${route}: a dashboard session is no API credential`)
  }
  for (const [route, rule] of Object.entries(ROUTES)) {
    if (rule.access !== 'session' && rule.access !== 'admin') continue
    const [method, pattern] = route.split(' ')
    if (method !== 'GET') continue
    const res = await w.app.inject({ url: rule.sample ?? pattern, headers: bearer(w.root.key) })
    t.equal(res.statusCode, 303, `${route}: an API key (even an admin's) is no dashboard session`)
  }
})

t.test('each route keeps accounts apart', async t => {
  const { w } = await worldWithRoutes(t)
  for (const [route, rule] of Object.entries(ROUTES)) await t.test(route, async t => rule.check(t, w))
})
