// The dashboard's and the API's response headers and the dashboard's session
// and CSRF handling, as a browser meets them:
// - every dashboard page: a strict CSP (nothing inline, no framing, no <base>),
//   X-Frame-Options: DENY, nosniff, no referrer, no caching, HTML with a
//   charset; and the pages have nothing inline the CSP would block;
// - every API, health, metrics and docs response: nosniff, JSON where JSON;
// - cookies: HttpOnly, SameSite=Lax, Path=/api, Secure behind TLS or with
//   COOKIE_SECURE=true;
// - CSRF: every dashboard POST the app registers refuses a missing or forged
//   token, and a token is good only for the session it was rendered for;
// - sessions: a new one at every log-in (a planted cookie is never adopted),
//   and logging out ends it on the server, not just in the browser.

import t, { type Test } from 'tap'
import type { InjectOptions, LightMyRequestResponse } from 'fastify'
import { buildTestApp, chatBody } from '../helpers/app.ts'
import { Browser, csrfToken } from '../dashboard/jar.ts'
import { cookieHeader, dashboardKey, loggedIn, signedUp } from './people.ts'

const TIERS = JSON.stringify({ tiers: { free: { requests_per_minute: 100 }, pro: {}, unlimited: {} } })

/** CSP directives by name: `default-src 'none'` -> { 'default-src': ["'none'"] }. */
function directives (csp: string | undefined): Record<string, string[]> {
  const out: Record<string, string[]> = {}
  for (const part of (csp ?? '').split(';').map(p => p.trim()).filter(Boolean)) {
    const [name, ...sources] = part.split(/\s+/)
    out[name] = sources
  }
  return out
}

function checkPageHeaders (t: Test, label: string, res: LightMyRequestResponse): void {
  const csp = directives(res.headers['content-security-policy'] as string | undefined)
  t.same(csp['default-src'], ["'none'"], `${label}: default-src 'none'`)
  t.same(csp['script-src'], ["'self'"], `${label}: scripts only from chatd`)
  t.same(csp['style-src'], ["'self'"], `${label}: styles only from chatd`)
  t.same(csp['frame-ancestors'], ["'none'"], `${label}: frame-ancestors 'none'`)
  t.same(csp['base-uri'], ["'none'"], `${label}: base-uri 'none'`)
  t.same(csp['object-src'], ["'none'"], `${label}: object-src 'none'`)
  t.same(csp['form-action'], ["'self'"], `${label}: forms post only to chatd`)
  t.notOk(Object.values(csp).flat().some(s => /unsafe-|^\*$|^https?:$|^data:$/.test(s)), `${label}: no unsafe-*, wildcard or scheme sources`)
  t.equal(res.headers['x-frame-options'], 'DENY', `${label}: X-Frame-Options`)
  t.equal(res.headers['x-content-type-options'], 'nosniff', `${label}: nosniff`)
  t.equal(res.headers['referrer-policy'], 'no-referrer', `${label}: Referrer-Policy`)
  t.equal(res.headers['cache-control'], 'no-store', `${label}: not cached`)
  t.equal(res.headers['content-type'], 'text/html; charset=utf-8', `${label}: HTML with its charset`)
  // The CSP forbids inline code; a page that had some would break, so none may have it.
  t.notMatch(res.body, /<script(?![^>]*\ssrc=)[^>]*>/, `${label}: no inline script`)
  t.notMatch(res.body, /<style[\s>]|\sstyle=/, `${label}: no inline style`)
  t.notMatch(res.body, /\son[a-z]+\s*=|javascript:/i, `${label}: no inline event handlers`)
}

t.test('every kind of dashboard page carries the strict headers', async t => {
  const { app, accounts } = await buildTestApp(t, { tiers: TIERS })
  const root = await accounts.create({ email: 'root@example.com', isAdmin: true })
  await accounts.setPassword(root.id, 'root password')

  const anonymous = new Browser(app)
  const pages: Array<[string, LightMyRequestResponse]> = [
    ['log-in page', await anonymous.get('/api/login')],
    ['register page', await anonymous.get('/api/register')],
    ['failed log-in', await anonymous.post('/api/login', { email: 'x@example.com', password: 'wrong password' }, { csrfFrom: '/api/login' })],
    ['CSRF refusal', await anonymous.post('/api/login', { email: 'x@example.com', password: 'x' })],
  ]
  const ann = await signedUp(app, 'ann@example.com', 'ann password')
  pages.push(['dashboard', await ann.get('/api')])
  pages.push(['password page', await ann.get('/api/password')])
  pages.push(['new key page', await ann.post('/api/keys', { name: 'laptop' }, { csrfFrom: '/api' })])
  pages.push(['refused revoke', await ann.post('/api/keys/revoke', { prefix: 'sk-chatd-nobody' }, { csrfFrom: '/api' })])
  pages.push(['403 for a user on the admin page', await ann.get('/api/admin')])
  const admin = await loggedIn(app, 'root@example.com', 'root password')
  pages.push(['admin page', await admin.get('/api/admin')])

  for (const [label, res] of pages) checkPageHeaders(t, `${label} (${res.statusCode})`, res)
  t.same(pages.map(([, res]) => res.statusCode), [200, 200, 401, 403, 200, 200, 201, 404, 403, 200], 'each page answered as expected')
})

t.test('API, health, metrics and docs responses: nosniff, and JSON with its charset where JSON', async t => {
  const { app, auth } = await buildTestApp(t)
  const json = 'application/json; charset=utf-8'
  const cases: Array<[string, InjectOptions, number, string | RegExp]> = [
    ['models', { url: '/api/v1/models', headers: auth }, 200, json],
    ['one model', { url: '/api/v1/models/scripted', headers: auth }, 200, json],
    ['usage', { url: '/api/v1/usage', headers: auth }, 200, json],
    ['no key', { url: '/api/v1/models' }, 401, json],
    ['chat completion', { method: 'POST', url: '/api/v1/chat/completions', headers: auth, payload: chatBody() }, 200, json],
    ['streamed chat completion', { method: 'POST', url: '/api/v1/chat/completions', headers: auth, payload: chatBody({ stream: true }) }, 200, /^text\/event-stream/],
    ['invalid request', { method: 'POST', url: '/api/v1/chat/completions', headers: auth, payload: { model: 'scripted' } }, 400, json],
    ['unknown model', { url: '/api/v1/models/nope', headers: auth }, 404, json],
    ['unknown route', { url: '/api/v1/nope', headers: auth }, 404, json],
    ['unknown route outside the API', { url: '/nope' }, 404, json],
    ['health', { url: '/healthz' }, 200, json],
    ['readiness', { url: '/readyz' }, 200, json],
    ['metrics', { url: '/metrics' }, 200, /^text\/plain; version=[\d.]+; charset=utf-8$/],
    ['OpenAPI document', { url: '/docs/json' }, 200, json],
    ['docs page', { url: '/docs' }, 200, /^text\/html; charset=utf-8$/],
  ]
  for (const [label, request, status, type] of cases) {
    const res = await app.inject(request)
    t.equal(res.statusCode, status, `${label}: status`)
    t.equal(res.headers['x-content-type-options'], 'nosniff', `${label}: nosniff`)
    if (typeof type === 'string') t.equal(res.headers['content-type'], type, `${label}: content type`)
    else t.match(res.headers['content-type'], type, `${label}: content type`)
  }
})

/** The Set-Cookie line for `name` in a response. */
function setCookie (res: LightMyRequestResponse, name: string): string | undefined {
  return [res.headers['set-cookie'] ?? []].flat().find(line => line.startsWith(`${name}=`))
}

t.test('cookies: HttpOnly, SameSite=Lax, Path=/api; Secure behind TLS and with COOKIE_SECURE=true', async t => {
  const plain = await buildTestApp(t, { tiers: TIERS })
  const browser = new Browser(plain.app)
  const page = await browser.get('/api/register')
  const registered = await browser.post('/api/register', { email: 'ann@example.com', password: 'ann password', confirm: 'ann password' }, { csrfFrom: '/api/register' })
  const loggedOut = await browser.post('/api/logout', {}, { csrfFrom: '/api' })
  for (const [label, line] of [
    ['CSRF secret', setCookie(page, 'chatd_csrf')],
    ['session', setCookie(registered, 'chatd_session')],
    ['session cleared at log-out', setCookie(loggedOut, 'chatd_session')],
  ]) {
    t.ok(line, `${label}: set`)
    t.match(line, /; Path=\/api(;|$)/, `${label}: scoped to the dashboard`)
    t.match(line, /; HttpOnly(;|$)/, `${label}: HttpOnly`)
    t.match(line, /; SameSite=Lax(;|$)/, `${label}: SameSite=Lax`)
    t.notMatch(line, /; Secure/, `${label}: no Secure on plain HTTP with COOKIE_SECURE=auto`)
  }
  const spoofed = await plain.app.inject({ url: '/api/login', headers: { 'x-forwarded-proto': 'https' } })
  t.notMatch(setCookie(spoofed, 'chatd_csrf'), /; Secure/, 'X-Forwarded-Proto is not believed without TRUST_PROXY')

  const proxied = await buildTestApp(t, { tiers: TIERS, env: { TRUST_PROXY: 'true' } })
  const viaTls = new Browser(proxied.app)
  viaTls.forwardedProto = 'https'
  const tlsPage = await viaTls.get('/api/register')
  const tlsSession = await viaTls.post('/api/register', { email: 'bob@example.com', password: 'bob password', confirm: 'bob password' }, { csrfFrom: '/api/register' })
  t.match(setCookie(tlsPage, 'chatd_csrf'), /; Secure/, 'behind a TLS proxy: the CSRF cookie is Secure')
  t.match(setCookie(tlsSession, 'chatd_session'), /; HttpOnly; SameSite=Lax; Secure|; Secure/, 'behind a TLS proxy: the session cookie is Secure')

  const strict = await buildTestApp(t, { tiers: TIERS, env: { COOKIE_SECURE: 'true' } })
  const strictBrowser = new Browser(strict.app)
  const strictPage = await strictBrowser.get('/api/register')
  const strictSession = await strictBrowser.post('/api/register', { email: 'cat@example.com', password: 'cat password', confirm: 'cat password' }, { csrfFrom: '/api/register' })
  t.match(setCookie(strictPage, 'chatd_csrf'), /; Secure/, 'COOKIE_SECURE=true: Secure even over plain HTTP')
  t.match(setCookie(strictSession, 'chatd_session'), /; Secure/, 'COOKIE_SECURE=true: the session cookie too')
})

t.test('CSRF: every dashboard POST the app registers refuses a missing or forged token', async t => {
  const posts: string[] = []
  const { app, accounts } = await buildTestApp(t, {
    tiers: TIERS,
    onRoute: route => {
      const methods = [route.method].flat()
      if (methods.includes('POST') && route.url.startsWith('/api/') && !route.url.startsWith('/api/v1/')) posts.push(route.url)
    },
  })
  t.ok(posts.length >= 7, `found the dashboard's forms: ${posts.join(', ')}`)
  // An admin, so that nothing but the token can be the reason for a refusal.
  const root = await accounts.create({ email: 'root@example.com', isAdmin: true })
  await accounts.setPassword(root.id, 'root password')
  const admin = await loggedIn(app, 'root@example.com', 'root password')
  const session = admin.cookies.get('chatd_session')
  for (const url of posts) {
    const form = { name: 'k', prefix: 'sk-chatd-AAAAAA', account: String(root.id), tier: 'pro', email: 'root@example.com', password: 'root password', confirm: 'x', current: 'root password', new: 'new password 1' }
    const missing = await admin.post(url, form)
    t.equal(missing.statusCode, 403, `${url}: no token`)
    t.match(missing.body, /Form expired/, `${url}: says why`)
    const forged = await admin.post(url, { ...form, _csrf: 'forged-token' })
    t.equal(forged.statusCode, 403, `${url}: a forged token`)
  }
  t.equal(admin.cookies.get('chatd_session'), session, 'no refused post logged anyone in or out')
  t.same(await accounts.listKeys(root.id), [], 'no refused post made a key')
  t.equal((await accounts.findById(root.id))!.tier, 'free', 'no refused post changed a tier')
  t.ok(await accounts.verifyLogin('root@example.com', 'root password'), 'no refused post changed the password')
  t.equal((await admin.get('/api')).statusCode, 200, 'still logged in')
})

t.test('CSRF: a token is good only for the session it was rendered for', async t => {
  const { app, accounts } = await buildTestApp(t, { tiers: TIERS })
  const ann = await signedUp(app, 'ann@example.com', 'ann password')
  const bob = await signedUp(app, 'bob@example.com', 'bob password')
  const bobAccount = (await accounts.findByEmail('bob@example.com'))!
  const postKey = (cookie: string, token: string) => app.inject({
    method: 'POST',
    url: '/api/keys',
    headers: { cookie, 'content-type': 'application/x-www-form-urlencoded' },
    payload: new URLSearchParams({ name: 'planted', _csrf: token }).toString(),
  })

  // Ann's own (secret cookie, token) pair, planted in Bob's browser next to Bob's session.
  const annToken = csrfToken((await ann.get('/api')).body)
  const planted = `chatd_csrf=${ann.cookies.get('chatd_csrf')}; chatd_session=${bob.cookies.get('chatd_session')}`
  t.equal((await postKey(planted, annToken)).statusCode, 403, 'a planted secret cookie and its token do not work with another session')
  t.same(await accounts.listKeys(bobAccount.id), [], 'Bob got no key')

  // A token from before log-in is worthless after it.
  const visitor = new Browser(app)
  const anonymousToken = csrfToken((await visitor.get('/api/login')).body)
  await visitor.post('/api/login', { email: 'bob@example.com', password: 'bob password', _csrf: anonymousToken })
  t.equal((await postKey(cookieHeader(visitor), anonymousToken)).statusCode, 403, 'a token rendered before log-in')
  // And one from an earlier session of the same browser.
  const earlierToken = csrfToken((await visitor.get('/api')).body)
  await visitor.post('/api/logout', { _csrf: earlierToken })
  await visitor.post('/api/login', { email: 'bob@example.com', password: 'bob password' }, { csrfFrom: '/api/login' })
  t.equal((await postKey(cookieHeader(visitor), earlierToken)).statusCode, 403, 'a token from the previous session')
  t.same(await accounts.listKeys(bobAccount.id), [], 'still no key')

  const fresh = csrfToken((await visitor.get('/api')).body)
  t.equal((await postKey(cookieHeader(visitor), fresh)).statusCode, 201, 'the token the current session rendered works')
  t.equal((await accounts.listKeys(bobAccount.id)).length, 1)
})

t.test('session fixation: log-in and registration always issue a new session; a planted one is never adopted', async t => {
  const { app } = await buildTestApp(t, { tiers: TIERS })
  await signedUp(app, 'ann@example.com', 'ann password')

  // A session id the attacker made up.
  const madeUp = 'A'.repeat(43)
  const victim = new Browser(app)
  victim.cookies.set('chatd_session', madeUp)
  const login = await victim.post('/api/login', { email: 'ann@example.com', password: 'ann password' }, { csrfFrom: '/api/login' })
  t.equal(login.statusCode, 303)
  t.not(victim.cookies.get('chatd_session'), madeUp, 'the made-up id is replaced')
  t.equal((await app.inject({ url: '/api', headers: { cookie: `chatd_session=${madeUp}` } })).statusCode, 303, 'and opens nothing')

  // A real session of the attacker's own, planted before the victim logs in.
  const attacker = await signedUp(app, 'mallory@example.com', 'mallory password')
  const attackersSession = attacker.cookies.get('chatd_session')!
  const planted = new Browser(app)
  planted.cookies.set('chatd_session', attackersSession)
  planted.cookies.set('chatd_csrf', attacker.cookies.get('chatd_csrf')!)
  const victimLogin = await planted.post('/api/login', { email: 'ann@example.com', password: 'ann password' }, { csrfFrom: '/api' })
  t.equal(victimLogin.statusCode, 303)
  const victimsSession = planted.cookies.get('chatd_session')
  t.not(victimsSession, attackersSession, 'log-in issues a new id')
  t.match((await planted.get('/api')).body, /ann@example\.com/, 'the victim is logged in as herself')
  t.equal((await attacker.get('/api')).statusCode, 303, 'the planted session was ended, so the attacker does not share the victim\'s')

  // Registration from a browser that still holds a session does the same.
  const holder = await signedUp(app, 'old@example.com', 'old password')
  const before = holder.cookies.get('chatd_session')!
  const blank = new Browser(app)
  blank.cookies.set('chatd_session', before)
  blank.cookies.set('chatd_csrf', holder.cookies.get('chatd_csrf')!)
  const token = csrfToken((await blank.get('/api')).body)
  const registered = await blank.post('/api/register', { email: 'new@example.com', password: 'new password', confirm: 'new password', _csrf: token })
  t.equal(registered.statusCode, 303)
  t.not(blank.cookies.get('chatd_session'), before, 'registration issues a new id')
  t.equal((await app.inject({ url: '/api', headers: { cookie: `chatd_session=${before}` } })).statusCode, 303, 'and ends the one the browser came with')
})

t.test('logging out ends the session on the server', async t => {
  const { app, db, accounts } = await buildTestApp(t, { tiers: TIERS })
  const ann = await signedUp(app, 'ann@example.com', 'ann password')
  const annId = (await accounts.findByEmail('ann@example.com'))!.id
  const stolen = cookieHeader(ann)
  const stolenToken = csrfToken((await ann.get('/api')).body)
  const sessions = () => db.selectFrom('sessions').select('id').where('account_id', '=', annId).execute()
  t.equal((await sessions()).length, 1)

  const out = await ann.post('/api/logout', { _csrf: stolenToken })
  t.equal(out.statusCode, 303)
  t.same(await sessions(), [], 'the session row is gone')
  t.equal((await app.inject({ url: '/api', headers: { cookie: stolen } })).statusCode, 303, 'a copy of the old cookie opens nothing')
  const replay = await app.inject({
    method: 'POST',
    url: '/api/keys',
    headers: { cookie: stolen, 'content-type': 'application/x-www-form-urlencoded' },
    payload: new URLSearchParams({ name: 'after logout', _csrf: stolenToken }).toString(),
  })
  t.equal(replay.statusCode, 303, 'a form replayed with the old cookie and token is sent to log in')
  t.equal(replay.headers.location, '/api/login')
  t.same(await accounts.listKeys(annId), [], 'and does nothing')

  // Keys made before stay usable: logging out of the dashboard is not revoking.
  const again = await loggedIn(app, 'ann@example.com', 'ann password')
  const key = await dashboardKey(again, 'cli')
  await again.post('/api/logout', {}, { csrfFrom: '/api' })
  t.equal((await app.inject({ url: '/api/v1/models', headers: { authorization: `Bearer ${key}` } })).statusCode, 200)
})
