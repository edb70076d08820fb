// The dashboard through inject(): pages, sessions, cookies and their flags,
// CSRF on every form, log-in throttling, keys shown once and scoped to their
// account, closed registration, admin tiers and security headers. The same
// flows in a real browser are in browser.test.ts.

import { spawn } from 'node:child_process'
import { once } from 'node:events'
import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import t from 'tap'
import { Accounts } from '../../src/accounts/accounts.ts'
import { ensureAdminAccount } from '../../src/accounts/bootstrap.ts'
import { apiKeyPrefix } from '../../src/accounts/api-key-format.ts'
import { buildTestApp, chatBody } from '../helpers/app.ts'
import { REPO_ROOT } from '../helpers/models.ts'
import { dashboardKey, loggedIn } from '../security/people.ts'
import { Browser, csrfToken } from './jar.ts'

const TIERS = JSON.stringify({ tiers: { free: { requests_per_minute: 10, calls_per_month: 100 }, pro: { requests_per_minute: 100 }, unlimited: {} } })

/** root@example.com, an admin with a password, and a browser logged in as it. */
async function rootAdmin (app: Browser['app'], accounts: Accounts) {
  const account = await accounts.create({ email: 'root@example.com', isAdmin: true })
  await accounts.setPassword(account.id, 'root password')
  return { account, browser: await loggedIn(app, 'root@example.com', 'root password') }
}

async function registered (app: Browser['app'], email = 'ann@example.com', password = 'ann password') {
  const browser = new Browser(app)
  const res = await browser.post('/api/register', { email, password, confirm: password }, { csrfFrom: '/api/register' })
  if (res.statusCode !== 303) throw new Error(`registration failed: ${res.statusCode} ${res.body}`)
  return browser
}

t.test('signed out: pages redirect to the log-in page; the forms carry CSRF tokens; security headers', async t => {
  const { app } = await buildTestApp(t, { tiers: TIERS })
  for (const url of ['/api', '/api/', '/api/password', '/api/admin']) {
    const res = await app.inject({ url })
    t.equal(res.statusCode, 303, url)
    t.equal(res.headers.location, '/api/login')
  }
  const login = await app.inject({ url: '/api/login' })
  t.equal(login.statusCode, 200)
  t.match(login.headers['content-type'], /^text\/html/)
  t.match(login.body, /name="_csrf" value="[^"]+"/)
  t.match(login.headers['content-security-policy'], /script-src 'self'/)
  t.notMatch(login.headers['content-security-policy'], /upgrade-insecure-requests/, 'plain-HTTP localhost keeps working')
  t.equal(login.headers['x-frame-options'], 'DENY', 'no framing (test/security/headers.test.ts has the rest)')
  t.equal(login.headers['x-content-type-options'], 'nosniff')
  t.equal(login.headers['referrer-policy'], 'no-referrer')
  t.equal(login.headers['cache-control'], 'no-store')
  t.match(login.headers['set-cookie'], /chatd_csrf=[^;]+; Path=\/api; HttpOnly; SameSite=Lax/)
  t.equal((await app.inject({ url: '/api/assets/copy.js' })).statusCode, 200)
  t.notOk((await app.inject({ url: '/api/v1/models' })).headers['content-security-policy'], 'the JSON API is not touched')
})

t.test('register, see the dashboard, log out, log in again; session cookie flags', async t => {
  const { app, db } = await buildTestApp(t, { tiers: TIERS })
  const browser = new Browser(app)
  const res = await browser.post('/api/register', { email: 'Ann@Example.com', password: 'ann password', confirm: 'ann password' }, { csrfFrom: '/api/register' })
  t.equal(res.statusCode, 303)
  t.equal(res.headers.location, '/api')
  const cookie = [res.headers['set-cookie']].flat().find(c => c!.startsWith('chatd_session='))!
  t.match(cookie, /^chatd_session=[A-Za-z0-9_-]{43}; Max-Age=604800; Path=\/api; HttpOnly; SameSite=Lax$/, 'HttpOnly, SameSite, no Secure over plain HTTP (COOKIE_SECURE=auto)')

  const home = await browser.get('/api')
  t.equal(home.statusCode, 200)
  t.match(home.body, /ann@example\.com/)
  t.match(home.body, /<span class="tier">free<\/span> tier/, 'new accounts are on the default tier')
  t.match(home.body, /100 <small>left of 100<\/small>/, 'the allowance')
  t.match(home.body, /<svg class="chart"/, 'the chart is server-rendered SVG')
  t.match(home.body, /No keys yet/)

  const stored = await db.selectFrom('accounts').select(['tier', 'password_hash']).where('email', '=', 'ann@example.com').executeTakeFirstOrThrow()
  t.equal(stored.tier, 'free')
  t.match(stored.password_hash, /^\$argon2id\$/)

  const out = await browser.post('/api/logout', {}, { csrfFrom: '/api' })
  t.equal(out.statusCode, 303)
  t.equal(out.headers.location, '/api/login')
  t.notOk(browser.cookies.has('chatd_session'), 'the cookie is cleared')
  t.equal((await browser.get('/api')).statusCode, 303, 'signed out')

  const wrong = await browser.post('/api/login', { email: 'ann@example.com', password: 'not it' }, { csrfFrom: '/api/login' })
  t.equal(wrong.statusCode, 401)
  t.match(wrong.body, /do not match an account/)
  const right = await browser.post('/api/login', { email: 'ANN@example.com', password: 'ann password' }, { csrfFrom: '/api/login' })
  t.equal(right.statusCode, 303)
  t.equal((await browser.get('/api')).statusCode, 200)
})

t.test('a logged-out session token stops working everywhere', async t => {
  const { app } = await buildTestApp(t, { tiers: TIERS })
  const browser = await registered(app)
  const token = browser.cookies.get('chatd_session')!
  await browser.post('/api/logout', {}, { csrfFrom: '/api' })
  const replay = await app.inject({ url: '/api', headers: { cookie: `chatd_session=${token}` } })
  t.equal(replay.statusCode, 303, 'the old cookie no longer opens the dashboard')
})

t.test('Secure cookies: behind a TLS proxy with TRUST_PROXY (auto), and always with COOKIE_SECURE=true', async t => {
  const proxied = await buildTestApp(t, { tiers: TIERS, env: { TRUST_PROXY: 'true' } })
  const viaTls = new Browser(proxied.app)
  viaTls.forwardedProto = 'https'
  const res = await viaTls.post('/api/register', { email: 'a@example.com', password: 'a password', confirm: 'a password' }, { csrfFrom: '/api/register' })
  t.match([res.headers['set-cookie']].flat().join('\n'), /chatd_session=[^;]+;.*; Secure/)

  const strict = await buildTestApp(t, { tiers: TIERS, env: { COOKIE_SECURE: 'true' } })
  const page = await strict.app.inject({ url: '/api/login' })
  t.match(page.headers['set-cookie'], /; Secure/, 'even over plain HTTP')
})

t.test('CSRF: a form post without the token, with a forged one, or without the cookie is refused with 403', async t => {
  const { app, accounts } = await buildTestApp(t, { tiers: TIERS })
  const browser = await registered(app)
  const account = (await accounts.findByEmail('ann@example.com'))!
  const post = (payload: string, cookie = [...browser.cookies].map(([k, v]) => `${k}=${v}`).join('; ')) =>
    app.inject({ method: 'POST', url: '/api/keys', headers: { cookie, 'content-type': 'application/x-www-form-urlencoded' }, payload })

  const missing = await post('name=sneaky')
  t.equal(missing.statusCode, 403)
  t.match(missing.body, /Form expired/)
  t.match(missing.headers['content-type'], /^text\/html/)
  t.equal((await post('name=sneaky&_csrf=forged-token')).statusCode, 403)
  const token = csrfToken((await browser.get('/api')).body)
  const session = `chatd_session=${browser.cookies.get('chatd_session')}`
  t.equal((await post(`name=sneaky&_csrf=${encodeURIComponent(token)}`, session)).statusCode, 403, 'a token without its secret cookie')
  t.same(await accounts.listKeys(account.id), [], 'no key was made')

  const ok = await post(`name=mine&_csrf=${encodeURIComponent(token)}`)
  t.equal(ok.statusCode, 201, 'with the token from the page, the same post works')

  const login = await app.inject({ method: 'POST', url: '/api/login', headers: { 'content-type': 'application/x-www-form-urlencoded' }, payload: 'email=ann%40example.com&password=ann+password' })
  t.equal(login.statusCode, 403, 'the log-in form is protected too (no log-in CSRF)')
})

t.test('a key is shown once, listed by prefix, usable, and revoked by its own account only', async t => {
  const { app, accounts } = await buildTestApp(t, { tiers: TIERS })
  const ann = await registered(app)
  const bob = await registered(app, 'bob@example.com', 'bob password')

  const created = await ann.post('/api/keys', { name: 'laptop' }, { csrfFrom: '/api' })
  t.equal(created.statusCode, 201)
  const key = /<code id="new-key" class="key">(sk-chatd-[A-Za-z0-9]{32})<\/code>/.exec(created.body)?.[1]
  t.ok(key, 'the new key is on the page')
  t.match(created.body, /only time it is shown/)
  t.match(created.body, /data-copy="new-key"/, 'with a copy button')
  const secret = key!.slice(15)

  const home = await ann.get('/api')
  t.notMatch(home.body, secret, 'the dashboard never shows the secret again')
  t.match(home.body, new RegExp(`<code>${apiKeyPrefix(key!)}…</code>`), 'listed by prefix')
  t.match(home.body, /<td>laptop<\/td>/)

  const call = await app.inject({ method: 'POST', url: '/api/v1/chat/completions', headers: { authorization: `Bearer ${key}` }, payload: chatBody() })
  t.equal(call.statusCode, 200)
  const after = await ann.get('/api')
  t.match(after.body, /<table id="recent">[\s\S]*scripted[\s\S]*completed/, 'the call is in the recent requests')
  t.notMatch(after.body, /<td>never<\/td>\s*<td class="actions">/, 'last-used time is set')

  // Bob tries to revoke Ann's key by its prefix: nothing happens.
  const stolen = await bob.post('/api/keys/revoke', { prefix: apiKeyPrefix(key!) }, { csrfFrom: '/api' })
  t.equal(stolen.statusCode, 404)
  t.notMatch((await bob.get('/api')).body, apiKeyPrefix(key!), 'Bob does not see Ann\'s keys')
  t.equal((await app.inject({ url: '/api/v1/models', headers: { authorization: `Bearer ${key}` } })).statusCode, 200, 'the key still works')

  const revoked = await ann.post('/api/keys/revoke', { prefix: apiKeyPrefix(key!) }, { csrfFrom: '/api' })
  t.equal(revoked.statusCode, 303)
  t.match((await ann.get(revoked.headers.location as string)).body, /The key was revoked/)
  const refused = await app.inject({ url: '/api/v1/models', headers: { authorization: `Bearer ${key}` } })
  t.equal(refused.statusCode, 401)
  t.match(refused.json(), { error: { code: 'invalid_api_key', message: /revoked/ } })

  const empty = await ann.post('/api/keys', { name: '   ' }, { csrfFrom: '/api' })
  t.equal(empty.statusCode, 400)
  t.match(empty.body, /needs a name/)
  t.equal((await accounts.listKeys((await accounts.findByEmail('ann@example.com'))!.id)).length, 1)
})

t.test('keys an account may make: past KEYS_PER_ACCOUNT or KEYS_PER_ACCOUNT_PER_DAY a page says why; the list shows the latest revoked', async t => {
  const { app, accounts } = await buildTestApp(t, { tiers: TIERS, env: { KEYS_PER_ACCOUNT: '2', KEYS_PER_ACCOUNT_PER_DAY: '3' } })
  const ann = await registered(app)
  const annId = (await accounts.findByEmail('ann@example.com'))!.id
  for (const name of ['one', 'two']) t.equal((await ann.post('/api/keys', { name }, { csrfFrom: '/api' })).statusCode, 201)
  const third = await ann.post('/api/keys', { name: 'three' }, { csrfFrom: '/api' })
  t.equal(third.statusCode, 409)
  t.match(third.headers['content-type'], /^text\/html/)
  t.match(third.body, /Request refused[\s\S]*at most 2 active keys\. Revoke one you no longer use/)
  t.notMatch(third.body, /sk-chatd-[A-Za-z0-9]{32}/, 'no key on the page')

  const [newest] = (await accounts.listKeysForPage(annId, 20)).keys
  t.equal((await ann.post('/api/keys/revoke', { prefix: newest.prefix }, { csrfFrom: '/api' })).statusCode, 303)
  t.equal((await ann.post('/api/keys', { name: 'three' }, { csrfFrom: '/api' })).statusCode, 201, 'revoking made room')
  const [third2] = (await accounts.listKeysForPage(annId, 20)).keys
  t.equal((await ann.post('/api/keys/revoke', { prefix: third2.prefix }, { csrfFrom: '/api' })).statusCode, 303)
  const fourth = await ann.post('/api/keys', { name: 'four' }, { csrfFrom: '/api' })
  t.equal(fourth.statusCode, 429, 'three made today: the fourth waits, active keys or not')
  t.match(fourth.body, /Too many attempts[\s\S]*at most 3 keys in 24 hours \(revoked ones count\)\. The next one can be created from \d{4}-\d\d-\d\d \d\d:\d\d UTC/)
  t.equal((await accounts.listKeys(annId)).length, 3, 'nothing stored for the refused ones')

  // The operator made many more (the CLI has no allowance) and revoked all but one: the page lists 21.
  for (let i = 0; i < 25; i++) await accounts.revokeKey((await accounts.createKey(annId, { name: `old ${i}` })).info.prefix)
  const home = await ann.get('/api')
  t.equal([...home.body.matchAll(/<span class="badge">revoked<\/span>/g)].length, 20, 'the 20 latest revoked keys')
  t.equal([...home.body.matchAll(/aria-label="Revoke /g)].length, 1, 'and the active one')
  t.match(home.body, /7 older revoked keys are not listed\./)
  t.match(home.body, /<td>old 24<\/td>[\s\S]*<td>old 5<\/td>/, 'newest first')
  t.notMatch(home.body, /<td>old 4<\/td>/)
})

t.test('registration: duplicate emails, short and mismatched passwords, and REGISTRATION=closed', async t => {
  const { app } = await buildTestApp(t, { tiers: TIERS })
  await registered(app)
  const browser = new Browser(app)
  const dup = await browser.post('/api/register', { email: 'ann@example.com', password: 'another one', confirm: 'another one' }, { csrfFrom: '/api/register' })
  t.equal(dup.statusCode, 409)
  const short = await browser.post('/api/register', { email: 'c@example.com', password: 'short', confirm: 'short' }, { csrfFrom: '/api/register' })
  t.equal(short.statusCode, 400)
  t.match(short.body, /at least 8 characters/)
  t.match(short.body, /value="c@example.com"/, 'the email is kept in the form')
  const mismatch = await browser.post('/api/register', { email: 'c@example.com', password: 'password 1', confirm: 'password 2' }, { csrfFrom: '/api/register' })
  t.match(mismatch.body, /passwords differ/)

  const closed = await buildTestApp(t, { tiers: TIERS, env: { REGISTRATION: 'closed' } })
  const page = await closed.app.inject({ url: '/api/register' })
  t.equal(page.statusCode, 403)
  t.match(page.body, /Registration is closed/)
  t.notMatch((await closed.app.inject({ url: '/api/login' })).body, /href="\/api\/register"/, 'no register link')
  const attempt = await new Browser(closed.app).post('/api/register', { email: 'd@example.com', password: 'password d', confirm: 'password d' }, { csrfFrom: '/api/login' })
  t.equal(attempt.statusCode, 403)
  t.equal(await closed.accounts.findByEmail('d@example.com'), undefined)
})

t.test('log-in attempts are limited per client address', async t => {
  const { app } = await buildTestApp(t, { tiers: TIERS, env: { LOGIN_ATTEMPTS_PER_MINUTE: '3' } })
  const browser = new Browser(app)
  const token = csrfToken((await browser.get('/api/login')).body)
  const statuses = []
  for (let i = 0; i < 5; i++) statuses.push((await browser.post('/api/login', { email: 'x@example.com', password: 'guess ' + i, _csrf: token })).statusCode)
  t.same(statuses, [401, 401, 401, 429, 429])
  const limited = await browser.post('/api/login', { email: 'x@example.com', password: 'x', _csrf: token })
  t.match(limited.headers['retry-after'], /^\d+$/)
  t.match(limited.body, /Too many attempts/)
})

t.test('changing the password ends the other sessions', async t => {
  const { app } = await buildTestApp(t, { tiers: TIERS })
  const here = await registered(app)
  const elsewhere = new Browser(app)
  await elsewhere.post('/api/login', { email: 'ann@example.com', password: 'ann password' }, { csrfFrom: '/api/login' })
  t.equal((await elsewhere.get('/api')).statusCode, 200)

  const wrong = await here.post('/api/password', { current: 'nope nope', new: 'new password', confirm: 'new password' }, { csrfFrom: '/api/password' })
  t.equal(wrong.statusCode, 401)
  const changed = await here.post('/api/password', { current: 'ann password', new: 'new password', confirm: 'new password' }, { csrfFrom: '/api/password' })
  t.equal(changed.statusCode, 303)
  t.match((await here.get('/api?done=password')).body, /Your password was changed/)
  t.equal((await elsewhere.get('/api')).statusCode, 303, 'the other browser is logged out')
  const relogin = await new Browser(app).post('/api/login', { email: 'ann@example.com', password: 'new password' }, { csrfFrom: '/api/login' })
  t.equal(relogin.statusCode, 303)
})

t.test('deleting one\'s account: the password and the box are asked for, then its keys stop working, it is logged out, and the email can register again', async t => {
  const { app, db } = await buildTestApp(t, { tiers: TIERS })
  const accounts = new Accounts(db)
  const ann = await registered(app)
  const bob = await registered(app, 'bob@example.com', 'bob password')
  const annKey = await dashboardKey(ann, 'k')
  const bobKey = await dashboardKey(bob, 'k')
  t.equal((await app.inject({ method: 'POST', url: '/api/v1/chat/completions', headers: { authorization: `Bearer ${annKey}` }, payload: chatBody() })).statusCode, 200)
  const annId = (await accounts.findByEmail('ann@example.com'))!.id

  const page = await ann.get('/api/delete-account')
  t.equal(page.statusCode, 200)
  t.match(page.body, /ann@example\.com<\/strong> and everything it holds/)
  t.match((await ann.get('/api/password')).body, /href="\/api\/delete-account"/, 'the password page links to it')
  const unticked = await ann.post('/api/delete-account', { password: 'ann password' }, { csrfFrom: '/api/delete-account' })
  t.equal(unticked.statusCode, 400)
  t.match(unticked.body, /Tick the box/)
  const wrong = await ann.post('/api/delete-account', { password: 'not ann', confirm: 'yes' }, { csrfFrom: '/api/delete-account' })
  t.equal(wrong.statusCode, 401)
  t.match(wrong.body, /nothing was deleted/)
  const forged = await ann.post('/api/delete-account', { password: 'ann password', confirm: 'yes', _csrf: 'forged' })
  t.equal(forged.statusCode, 403, 'CSRF is checked')
  t.ok(await accounts.findById(annId), 'still there after each refusal')

  const deleted = await ann.post('/api/delete-account', { password: 'ann password', confirm: 'yes' }, { csrfFrom: '/api/delete-account' })
  t.equal(deleted.statusCode, 303)
  t.equal(deleted.headers.location, '/api/login?done=deleted')
  t.match([deleted.headers['set-cookie']].flat().join('\n'), /chatd_session=;/, 'the session cookie is cleared')
  t.match((await ann.get('/api/login?done=deleted')).body, /The account was deleted/)
  t.equal((await ann.get('/api')).statusCode, 303, 'logged out')
  t.equal(await accounts.findById(annId), undefined)
  const refused = await app.inject({ url: '/api/v1/models', headers: { authorization: `Bearer ${annKey}` } })
  t.equal(refused.statusCode, 401, 'its key stops working at once')
  t.equal((await db.selectFrom('usage_records').select('id').where('account_id', '=', annId).execute()).length, 0, 'its usage went with it')
  t.equal((await app.inject({ url: '/api/v1/models', headers: { authorization: `Bearer ${bobKey}` } })).statusCode, 200, 'another account is untouched')
  t.equal((await bob.get('/api')).statusCode, 200)
  t.equal((await new Browser(app).post('/api/login', { email: 'ann@example.com', password: 'ann password' }, { csrfFrom: '/api/login' })).statusCode, 401)
  const again = await registered(app)
  t.ok((await accounts.findByEmail('ann@example.com'))!.id > annId, 'registered again, under a new id')
  t.equal((await again.get('/api')).statusCode, 200)

  // An admin is deleted by the operator, never from the dashboard: the server is not left without one.
  const { account: root, browser: admin } = await rootAdmin(app, accounts)
  const kept = await admin.post('/api/delete-account', { password: 'root password', confirm: 'yes' }, { csrfFrom: '/api/delete-account' })
  t.equal(kept.statusCode, 403)
  t.match(kept.body, /chatd accounts delete/)
  t.ok(await accounts.findById(root.id))
  t.equal((await app.inject({ url: '/api/login?done=constructor' })).body.includes('class="notice"'), false, 'a crafted notice shows nothing')
})

t.test('admins see every account and set tiers; others may not', async t => {
  const { app, db } = await buildTestApp(t, { tiers: TIERS })
  const accounts = new Accounts(db)
  const { browser: root } = await rootAdmin(app, accounts)
  const user = await registered(app)
  const forbidden = await user.get('/api/admin')
  t.equal(forbidden.statusCode, 403)
  const sneaky = await user.post('/api/admin/tier', { account: String((await accounts.findByEmail('ann@example.com'))!.id), tier: 'pro' }, { csrfFrom: '/api' })
  t.equal(sneaky.statusCode, 403)

  const page = await root.get('/api/admin')
  t.equal(page.statusCode, 200)
  t.match(page.body, /ann@example\.com/)
  const ann = (await accounts.findByEmail('ann@example.com'))!
  const set = await root.post('/api/admin/tier', { account: String(ann.id), tier: 'pro' }, { csrfFrom: '/api/admin' })
  t.equal(set.statusCode, 303)
  t.equal((await accounts.findById(ann.id))!.tier, 'pro')
  t.match((await root.get(set.headers.location as string)).body, /The tier was changed/)
  t.match((await user.get('/api')).body, /<span class="tier">pro<\/span> tier/, 'the user sees the new tier')
  const bad = await root.post('/api/admin/tier', { account: String(ann.id), tier: 'platinum' }, { csrfFrom: '/api/admin' })
  t.equal(bad.statusCode, 400)
  t.match(bad.body, /There is no such tier in the tiers file\./)
  t.notMatch(bad.body, /platinum/, 'the submitted value is not echoed')
})

t.test('admins delete accounts that are not admins\' from the accounts page, after a confirmation; others may not', async t => {
  const { app, db } = await buildTestApp(t, { tiers: TIERS })
  const accounts = new Accounts(db)
  const { account: admin, browser: root } = await rootAdmin(app, accounts)
  const ann = await registered(app)
  const annId = (await accounts.findByEmail('ann@example.com'))!.id
  const annKey = await dashboardKey(ann, 'k')
  const bob = await registered(app, 'bob@example.com', 'bob password')

  t.equal((await bob.get(`/api/admin/delete?account=${annId}`)).statusCode, 403, 'a user may not open it')
  t.equal((await bob.post('/api/admin/delete', { account: String(annId), confirm: 'yes' }, { csrfFrom: '/api' })).statusCode, 403, 'nor post it')
  t.ok(await accounts.findById(annId))

  const list = await root.get('/api/admin')
  t.match(list.body, new RegExp(`href="/api/admin/delete\\?account=${annId}" aria-label="Delete ann@example\\.com"`))
  t.notMatch(list.body, new RegExp(`/api/admin/delete\\?account=${admin.id}"`), 'no delete link for an admin')
  const confirm = await root.get(`/api/admin/delete?account=${annId}`)
  t.equal(confirm.statusCode, 200)
  t.match(confirm.body, /This deletes <strong>ann@example\.com<\/strong>/)
  for (const odd of ['x', '-1', '1.5', '99999', '']) t.equal((await root.get(`/api/admin/delete?account=${odd}`)).statusCode, 404, `account=${odd}`)
  t.equal((await root.get(`/api/admin/delete?account=${admin.id}`)).statusCode, 403, 'an admin is deleted with the CLI only')
  t.equal((await root.post('/api/admin/delete', { account: String(admin.id), confirm: 'yes' }, { csrfFrom: '/api/admin' })).statusCode, 403)
  const unticked = await root.post('/api/admin/delete', { account: String(annId) }, { csrfFrom: '/api/admin' })
  t.equal(unticked.statusCode, 400)
  t.match(unticked.body, /Tick the box/)
  t.equal((await root.post('/api/admin/delete', { account: String(annId), confirm: 'yes', _csrf: 'forged' })).statusCode, 403, 'CSRF is checked')
  t.ok(await accounts.findById(annId), 'still there after each refusal')

  const deleted = await root.post('/api/admin/delete', { account: String(annId), confirm: 'yes' }, { csrfFrom: '/api/admin' })
  t.equal(deleted.statusCode, 303)
  t.equal(deleted.headers.location, '/api/admin?deleted=1')
  t.match((await root.get('/api/admin?deleted=1')).body, /The account was deleted/)
  t.equal(await accounts.findById(annId), undefined)
  t.equal((await app.inject({ url: '/api/v1/models', headers: { authorization: `Bearer ${annKey}` } })).statusCode, 401, 'its key stops working')
  t.equal((await ann.get('/api')).statusCode, 303, 'its session ended')
  t.equal((await bob.get('/api')).statusCode, 200, 'another account is untouched')
  t.equal((await root.post('/api/admin/delete', { account: String(annId), confirm: 'yes' }, { csrfFrom: '/api/admin' })).statusCode, 404, 'twice: no such account')
})

t.test('the accounts page shows 100 at a time, finds them by email, and comes back to the one just changed', async t => {
  const { app, db } = await buildTestApp(t, { tiers: TIERS })
  const accounts = new Accounts(db)
  const { browser: root } = await rootAdmin(app, accounts)
  for (let i = 0; i < 230; i++) await accounts.create({ email: `member${String(i).padStart(3, '0')}@example.org` })
  const rows = (body: string) => [...body.matchAll(/<input type="hidden" name="account" value="\d+">/g)].length

  const first = await root.get('/api/admin')
  t.equal(rows(first.body), 100)
  t.match(first.body, /232 accounts; page 1 of 3\./, 'the test app\'s own account, the admin and 230 members')
  t.match(first.body, /href="\/api\/admin\?page=2" rel="next"/)
  t.notMatch(first.body, /rel="prev"/)
  const last = await root.get('/api/admin?page=3')
  t.equal(rows(last.body), 32)
  t.match(last.body, /member229@example\.org/)
  t.match(last.body, /href="\/api\/admin\?page=2" rel="prev"/)
  t.notMatch(last.body, /rel="next"/)

  const found = await root.get('/api/admin?q=MEMBER12')
  t.equal(rows(found.body), 10, 'member120 to member129')
  t.match(found.body, /10 accounts whose email contains “member12”\./)
  t.match(found.body, /name="q" maxlength="254" value="member12"/, 'the search stays in its box')
  t.match((await root.get('/api/admin?q=%25')).body, /0 accounts whose email contains “%”\./, 'a wildcard is a character')

  for (const url of ['/api/admin?page=abc', '/api/admin?page=-4', '/api/admin?page=1.5', '/api/admin?q=a&q=b', '/api/admin?page[x]=2']) {
    const res = await root.get(url)
    t.equal(res.statusCode, 200, url)
    t.equal(rows(res.body), 100, `${url}: the first page`)
  }
  const beyond = await root.get('/api/admin?page=99999999999')
  t.equal(beyond.statusCode, 200)
  t.equal(rows(beyond.body), 0)
  t.match(beyond.body, /href="\/api\/admin\?page=3" rel="prev"/, 'past the last page: a link back to it')

  const member = (await accounts.findByEmail('member150@example.org'))!
  const set = await root.post('/api/admin/tier', { account: String(member.id), tier: 'pro' }, { csrfFrom: '/api/admin' })
  t.equal(set.headers.location, `/api/admin?q=member150%40example.org&updated=${member.id}`)
  const back = await root.get(set.headers.location as string)
  t.match(back.body, /The tier was changed/)
  t.equal(rows(back.body), 1, 'the page shows the account changed, wherever it was in the list')
})

t.test('the README\'s path to the dashboard: the first admin has no password, the log-in page says how to set one, set-password, log in', async t => {
  const test = await buildTestApp(t, { tiers: TIERS })
  // What the first start makes: the admin account, with a key and no password.
  t.ok(await ensureAdminAccount(test.accounts, { email: 'admin@localhost', firstStart: true }))
  const browser = new Browser(test.app)
  const page = await browser.get('/api/login')
  t.match(page.body, /created by an operator.*has no password until one is set: <code>npx chatd accounts set-password --email you@example.com<\/code>/s, 'said to everyone, whatever the email')
  const before = await browser.post('/api/login', { email: 'admin@localhost', password: 'admin password' }, { csrfFrom: '/api/login' })
  t.equal(before.statusCode, 401)
  t.match(before.body, /do not match an account with a password\./)
  t.match(before.body, /chatd accounts set-password/)
  const nobody = await browser.post('/api/login', { email: 'nobody@example.com', password: 'admin password' }, { csrfFrom: '/api/login' })
  t.equal(nobody.body.replace(/name="_csrf" value="[^"]*"/, '').replace(/nobody@example.com/, ''), before.body.replace(/name="_csrf" value="[^"]*"/, '').replace(/admin@localhost/, ''), 'an unknown email gets the same page: nothing says which emails exist')

  // The README's command, run as the README runs it, the password on standard input.
  const readme = readFileSync(join(REPO_ROOT, 'README.md'), 'utf8')
  const command = /npx chatd (accounts set-password --email admin@localhost)\n/.exec(readme)?.[1]
  t.ok(command, 'the README\'s first-call steps say how')
  const database = test.config.database
  if (database.kind !== 'sqlite') throw new Error('the test app is on SQLite')
  const child = spawn(process.execPath, [join(REPO_ROOT, 'src/cli.ts'), ...command!.split(' ')], {
    env: { PATH: process.env.PATH, DATABASE_URL: `sqlite://${database.path}` },
    stdio: ['pipe', 'pipe', 'pipe'],
  })
  let out = ''
  let err = ''
  child.stdout.on('data', chunk => { out += chunk })
  child.stderr.on('data', chunk => { err += chunk })
  child.stdin.end('admin password\n')
  const [code] = await once(child, 'exit')
  t.equal(code, 0, err)
  t.equal(out, 'password set for admin@localhost; log in at /api\n')

  const after = await browser.post('/api/login', { email: 'admin@localhost', password: 'admin password' }, { csrfFrom: '/api/login' })
  t.equal(after.statusCode, 303)
  t.equal((await browser.get('/api')).statusCode, 200, 'logged in')
})

t.test('the dashboard says why "Calls this month" and the 30 days\' calls can differ', async t => {
  const { app } = await buildTestApp(t, { tiers: TIERS })
  const browser = await registered(app)
  const home = await browser.get('/api')
  t.equal(home.statusCode, 200)
  t.match(home.body, /<p class="muted" id="calls-differ">These are all calls, failed ones included, over 30 days \(UTC\)\. "Calls this month" above counts the calendar month's calls that reached the model: a failed call gives its call back/)
})
