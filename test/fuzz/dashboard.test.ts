// Property-based fuzzing of the dashboard at /api: its forms (log in, register, log out, change
// the password, create and revoke keys, set a tier, delete the account, delete another as the
// admin), its pages' query strings and paths, and the
// cookies a browser sends, as a visitor, a user and an admin. Whatever comes in, the answer is a
// page (HTML) or a redirect within /api, never a 5xx, a stack trace, another account's key or a
// hang; and another account, whose key is never sent, keeps its key working and unrevoked.
//
// Forms: a valid form of the route with one field set to a tricky value (huge, binary, broken
// Unicode, another account's email, key prefix or id), removed, sent twice, or joined by an odd
// field (`__proto__`, `a[b]`); sent as a form, as broken form text, as JSON, as another type or
// none; with the session's CSRF token, none, a forged one or another session's.
// CI runs a few hundred cases per property; `npm run fuzz` runs CHATD_FUZZ_RUNS.

import t, { type Test } from 'tap'
import fc from 'fast-check'
import type { LightMyRequestResponse } from 'fastify'
import { apiKeyPrefix } from '../../src/accounts/api-key-format.ts'
import { buildTestApp } from '../helpers/app.ts'
import { trickyString } from '../helpers/fuzz-bodies.ts'
import { assertHolds, checkErrorBody, FUZZ_SEED, fuzzRuns, prototypeIsClean, Tally, withinDeadline } from '../helpers/fuzz.ts'
import { REPO_ROOT } from '../helpers/models.ts'
import { Browser, csrfToken } from '../dashboard/jar.ts'

const CASE_DEADLINE_MS = 15_000
const TIERS = JSON.stringify({ tiers: { free: {}, pro: {}, unlimited: {} } })
const PASSWORD = 'a fuzzed password'

// Log-in throttling is off (a per-address throttle would answer 429 to most cases and reach no
// handler); keys are bounded low so the fuzz reaches that refusal too. The other account's key is
// read after every case, more often than its reads meter allows: that meter is off.
const { app, accounts, account: other, key: otherKey } = await buildTestApp(t, {
  tiers: TIERS,
  env: { LOGIN_ATTEMPTS_PER_MINUTE: '1000000000', KEYS_PER_ACCOUNT: '8', KEYS_PER_ACCOUNT_PER_DAY: '100000', READS_PER_ACCOUNT_PER_MINUTE: '0' },
})
// The other account is an admin's: an admin may delete any other account, so the one whose key
// must stay intact is one the accounts page will not delete (its id is among the tricky values).
await accounts.database.updateTable('accounts').set({ is_admin: true }).where('id', '=', other.id).execute()
const user = await accounts.register({ email: 'user2@example.com', password: PASSWORD })
const admin = await accounts.create({ email: 'admin@example.com', isAdmin: true })
await accounts.setPassword(admin.id, PASSWORD)

/** Who sends: nobody logged in, the user, the admin, or an account registered for the case alone (the only one a valid deletion may take). */
type Actor = 'visitor' | 'user' | 'admin' | 'newcomer'
const browsers: Record<'user' | 'admin', Browser> = { user: new Browser(app), admin: new Browser(app) }
const EMAIL: Record<'user' | 'admin', string> = { user: user.email, admin: admin.email }

/**
 * The actor's browser, logged in again when a case ended its session (a log-out, or a password
 * change by whoever it had logged in as); a visitor's is new every time.
 */
async function browserOf (actor: Actor): Promise<Browser> {
  if (actor === 'visitor') return new Browser(app)
  if (actor === 'newcomer') {
    const browser = new Browser(app)
    const res = await browser.post('/api/register', { email: `newcomer${registered++}@example.com`, password: PASSWORD, confirm: PASSWORD }, { csrfFrom: '/api/register' })
    if (res.statusCode !== 303) throw new Error(`a newcomer could not register: ${res.statusCode}`)
    return browser
  }
  const browser = browsers[actor]
  if (browser.cookies.has('chatd_session') && (await browser.get('/api')).statusCode !== 200) browser.cookies.delete('chatd_session')
  if (!browser.cookies.has('chatd_session')) {
    const res = await browser.post('/api/login', { email: EMAIL[actor], password: PASSWORD }, { csrfFrom: '/api/login' })
    if (res.statusCode !== 303) throw new Error(`the ${actor} could not log in again: ${res.statusCode}`)
  }
  return browser
}

let registered = 0
/** The account the admin's deletion form names: made for the case (prepare). */
let victim = 0
/** Each form as a browser would send it, valid for an actor allowed to send it. */
const FORMS: Record<string, () => Record<string, string>> = {
  '/api/login': () => ({ email: user.email, password: PASSWORD }),
  '/api/register': () => ({ email: `fuzz${registered++}@example.com`, password: PASSWORD, confirm: PASSWORD }),
  '/api/logout': () => ({}),
  // The new password is the current one: a valid case leaves it as it was.
  '/api/password': () => ({ current: PASSWORD, new: PASSWORD, confirm: PASSWORD }),
  '/api/keys': () => ({ name: 'fuzzed key' }),
  '/api/keys/revoke': () => ({ prefix: apiKeyPrefix(otherKey) }),
  '/api/admin/tier': () => ({ account: String(user.id), tier: 'pro' }),
  // Sent by a newcomer (actorOf): valid, it deletes that account alone.
  '/api/delete-account': () => ({ password: PASSWORD, confirm: 'yes' }),
  '/api/admin/delete': () => ({ account: String(victim), confirm: 'yes' }),
}

/** What a form needs made before it is sent: the admin's deletion, an account of its own to delete. */
async function prepare (url: string): Promise<void> {
  if (url === '/api/admin/delete') victim = (await accounts.create({ email: `victim${registered++}@example.com` })).id
}

/**
 * Who sends `url`'s form when the case says `actor`. A deletion is a newcomer's, never the user's
 * or the admin's browser's: either may be logged in as the user by then (a valid log-in form
 * sent from it), and the fuzz keeps its user. An admin's refusal is in test/dashboard/pages.test.ts.
 */
function actorOf (url: string, actor: Actor): Actor {
  return url === '/api/delete-account' && actor !== 'visitor' ? 'newcomer' : actor
}

/** Values that mean something to one of the forms, beside the generally tricky ones. */
const formValue = fc.oneof(
  { weight: 4, arbitrary: trickyString },
  {
    weight: 1,
    arbitrary: fc.constantFrom(other.email, user.email, admin.email, apiKeyPrefix(otherKey), otherKey, String(other.id), String(admin.id),
      '0', '-1', '1e3', '9007199254740993', 'free', 'pro', 'unlimited', 'none', 'Free', '', PASSWORD, `${PASSWORD} `),
  }
)

type Change =
  | { kind: 'none' }
  | { kind: 'set' | 'twice', field: string, value: string }
  | { kind: 'drop', field: string }
  | { kind: 'extra', name: string, value: string }

const change: fc.Arbitrary<Change> = fc.oneof(
  fc.constant<Change>({ kind: 'none' }),
  fc.record({ kind: fc.constantFrom('set' as const, 'twice' as const), field: fc.constantFrom('email', 'password', 'confirm', 'current', 'new', 'name', 'prefix', 'account', 'tier', '_csrf'), value: formValue }),
  fc.record({ kind: fc.constant('drop' as const), field: fc.constantFrom('email', 'password', 'confirm', 'current', 'new', 'name', 'prefix', 'account', 'tier') }),
  fc.record({ kind: fc.constant('extra' as const), name: fc.constantFrom('__proto__', 'constructor', 'prototype', '__proto__[isAdmin]', 'a[b]', 'isAdmin', 'tier', 'user', ''), value: formValue })
)

/** How the form goes over the wire: its body text and content type (undefined: none sent). */
type Encoding = 'form' | 'broken form' | 'json' | 'text' | 'multipart' | 'no type' | 'utf-16 form'
const encoding = fc.constantFrom<Encoding>('form', 'form', 'form', 'broken form', 'json', 'text', 'multipart', 'no type', 'utf-16 form')
const breakage = fc.constantFrom('%', '%zz', '%ff%fe', '&&&', '==', '&=&', '%00', '+', '%E2%80%A8', ';')

type Csrf = 'valid' | 'none' | 'forged' | 'another session\'s'
const csrf = fc.constantFrom<Csrf>('valid', 'valid', 'valid', 'none', 'forged', 'another session\'s')

function formPairs (form: Record<string, string>, c: Change): Array<[string, string]> {
  const pairs = Object.entries(form)
  if (c.kind === 'set') return [...pairs.filter(([k]) => k !== c.field), [c.field, c.value]]
  if (c.kind === 'twice') return [...pairs, [c.field, c.value]]
  if (c.kind === 'drop') return pairs.filter(([k]) => k !== c.field)
  if (c.kind === 'extra') return [...pairs, [c.name, c.value]]
  return pairs
}

function wire (pairs: Array<[string, string]>, how: Encoding, broken: string): { payload: string | Buffer, type?: string } {
  const text = new URLSearchParams(pairs).toString()
  switch (how) {
    case 'form': return { payload: text, type: 'application/x-www-form-urlencoded' }
    case 'broken form': return { payload: `${broken}${text}${broken}${text.slice(0, 7)}${broken}`, type: 'application/x-www-form-urlencoded' }
    case 'utf-16 form': return { payload: Buffer.from(text, 'utf16le'), type: 'application/x-www-form-urlencoded; charset=utf-16' }
    case 'json': return { payload: JSON.stringify(Object.fromEntries(pairs)), type: 'application/json' }
    case 'text': return { payload: text, type: 'text/plain' }
    case 'multipart': return { payload: '--x\r\nContent-Disposition: form-data; name="name"\r\n\r\nk\r\n--x--\r\n', type: 'multipart/form-data; boundary=x' }
    case 'no type': return { payload: text }
  }
}

/** Statuses a dashboard answer may have. */
const STATUSES = new Set([200, 201, 303, 400, 401, 403, 404, 409, 413, 415, 429])

/**
 * Throws unless the answer is a page or a redirect within /api that leaks nothing; returns what
 * it was. `sent`: what the request held (a form may echo the submitter's own text, the other
 * account's key included when the case sent it).
 */
function checkPage (res: LightMyRequestResponse, what: string, sent = ''): string {
  if (!STATUSES.has(res.statusCode)) throw new Error(`${what}: status ${res.statusCode}: ${res.body.slice(0, 300)}`)
  if (res.body.includes(otherKey) && !sent.includes(otherKey)) throw new Error(`${what}: another account's key on the page`)
  if (res.statusCode === 303) {
    const location = String(res.headers.location)
    if (!/^\/api(?:[/?]|$)/.test(location)) throw new Error(`${what}: a redirect out of the dashboard, to ${location}`)
    return `303 ${location.replace(/\?.*/, '')}`
  }
  const type = String(res.headers['content-type'] ?? '')
  // What the app refuses before any route (a path that is no page, a malformed URL) is in the API's error shape.
  if ((res.statusCode === 400 || res.statusCode === 404) && type.startsWith('application/json')) return `${res.statusCode} ${checkErrorBody(JSON.parse(res.body), res.statusCode)}`
  // Static assets (CSS, the copy button's script) are the only non-HTML the dashboard serves.
  if (!type.startsWith('text/html') && !(res.statusCode === 200 && what.includes('/api/assets/'))) throw new Error(`${what}: ${res.statusCode} as ${type}, not a page: ${res.body.slice(0, 200)}`)
  if (/\n\s+at |node:internal|\.ts:\d+/.test(res.body) || res.body.includes(REPO_ROOT)) throw new Error(`${what}: a stack trace or a source path on the page`)
  return `${res.statusCode}`
}

/** The other account, which no case names but by its email, id or key prefix, is as it was. */
async function otherIsIntact (): Promise<void> {
  const models = await app.inject({ url: '/api/v1/models', headers: { authorization: `Bearer ${otherKey}` } })
  if (models.statusCode !== 200) throw new Error(`the other account's key now answers ${models.statusCode}`)
  const keys = await accounts.listKeys(other.id)
  if (keys.length !== 1 || keys[0].revokedAt !== null) throw new Error(`the other account's keys changed: ${JSON.stringify(keys)}`)
}

async function fuzz<T> (t: Test, name: string, runs: number, arbitrary: fc.Arbitrary<T>, send: (value: T) => Promise<string>): Promise<void> {
  const tally = new Tally()
  const started = performance.now()
  await assertHolds(t, fc.asyncProperty(arbitrary, async value => {
    tally.add(await withinDeadline(send(value), CASE_DEADLINE_MS, 'one case'))
    await otherIsIntact()
  }), runs)
  t.comment(`${name}: ${tally.cases} cases, seed ${FUZZ_SEED}, ${((performance.now() - started) / 1000).toFixed(1)} s; ${tally}`)
  t.ok(prototypeIsClean(), 'Object.prototype untouched')
  const home = await (await browserOf('user')).get('/api')
  t.equal(home.statusCode, 200, 'the user\'s dashboard still opens')
}

t.test('the valid forms do what they say', async t => {
  for (const [url, form] of Object.entries(FORMS)) {
    const actor = actorOf(url, url.startsWith('/api/admin/') ? 'admin' : url === '/api/login' || url === '/api/register' ? 'visitor' : 'user')
    const browser = await browserOf(actor)
    await prepare(url)
    const res = await browser.post(url, form(), { csrfFrom: actor === 'visitor' ? '/api/login' : '/api' })
    const expected = url === '/api/keys' ? 201 : url === '/api/keys/revoke' ? 404 : 303
    t.equal(res.statusCode, expected, `${url} as the ${actor}`)
  }
})

t.test('forms: one field changed, sent any way, with any CSRF token, by anyone', async t => {
  const cases = fc.record({
    url: fc.constantFrom(...Object.keys(FORMS)),
    actor: fc.constantFrom<Actor>('visitor', 'user', 'admin'),
    change,
    how: encoding,
    broken: breakage,
    csrf,
    forged: fc.string({ unit: 'binary', maxLength: 80 }),
  })
  await fuzz(t, 'forms', fuzzRuns(300), cases, async c => {
    const actor = actorOf(c.url, c.actor)
    const browser = await browserOf(actor)
    await prepare(c.url)
    const form = FORMS[c.url]()
    const page = actor === 'visitor' ? '/api/login' : '/api'
    if (c.csrf === 'valid') form._csrf = csrfToken((await browser.get(page)).body)
    if (c.csrf === 'forged') form._csrf = c.forged
    if (c.csrf === 'another session\'s') form._csrf = csrfToken((await (await browserOf(actor === 'admin' ? 'user' : 'admin')).get('/api')).body)
    const { payload, type } = wire(formPairs(form, c.change), c.how, c.broken)
    // The browser keeps what the answer set (a log-out, a new session), as a real one would.
    const res = await browser.send({ method: 'POST', url: c.url, headers: type ? { 'content-type': type } : {}, payload })
    if (res.statusCode === 201 && c.url !== '/api/keys') throw new Error(`201 from ${c.url}`)
    return `${c.url} ${checkPage(res, `POST ${c.url}`, payload.toString())}`
  })
})

t.test('pages: any query string and any path under /api', async t => {
  const segment = fc.oneof(trickyString.map(s => encodeURIComponent(s.slice(0, 2000).toWellFormed())), fc.string({ maxLength: 40 }), fc.constantFrom('..', '%2e%2e', '%2F', '%00', '%', '%zz', '.%2e/%2e%2e/etc/passwd', 'assets', 'copy.js', 'style.css'))
  const cases = fc.record({
    path: fc.constantFrom('/api', '/api/', '/api/login', '/api/register', '/api/password', '/api/delete-account', '/api/admin', '/api/keys', '/api/assets/', '/api/x/'),
    tail: fc.option(segment, { nil: undefined }),
    query: fc.array(fc.tuple(fc.constantFrom('done', 'updated', '__proto__', 'constructor', 'a[b]', 'x'), segment), { maxLength: 4 }),
    rawQuery: fc.option(fc.constantFrom('?', '??', '?&', '?=&=', '?%', '?done', '?done=revoked&done=password', '?updated=1&updated=2'), { nil: undefined }),
    actor: fc.constantFrom<Actor>('visitor', 'user', 'admin'),
  })
  await fuzz(t, 'pages', fuzzRuns(200), cases, async c => {
    const browser = await browserOf(c.actor)
    const url = `${c.path}${c.path.endsWith('/') ? c.tail ?? '' : ''}${c.rawQuery ?? (c.query.length > 0 ? '?' + c.query.map(([k, v]) => `${k}=${v}`).join('&') : '')}`
    const res = await browser.get(url)
    return `GET ${checkPage(res, `GET ${url}`)}`
  })
})

t.test('cookies: whatever a browser sends as the session and CSRF cookies', async t => {
  const value = fc.oneof(fc.string({ unit: 'binary', maxLength: 60 }), fc.string({ maxLength: 8000 }), fc.constantFrom('', '=', '"', '""', 's:', 's:x.y', '%', '%zz', ';', ','))
  const cases = fc.record({
    cookies: fc.array(fc.tuple(fc.constantFrom('chatd_session', 'chatd_csrf', '__proto__', 'constructor', 'x'), value), { maxLength: 5 }),
    post: fc.boolean(),
  })
  await fuzz(t, 'cookies', fuzzRuns(150), cases, async c => {
    // A header's value may hold no control character but a tab: what a browser could not send, Node would refuse to.
    // eslint-disable-next-line no-control-regex -- control characters are what is taken out
    const cookie = c.cookies.map(([k, v]) => `${k}=${v}`).join('; ').replace(/[\u0000-\u0008\u000a-\u001f\u007f-\uffff]/g, '')
    const res = c.post
      ? await app.inject({ method: 'POST', url: '/api/keys', headers: { cookie, 'content-type': 'application/x-www-form-urlencoded' }, payload: 'name=k' })
      : await app.inject({ url: '/api', headers: { cookie } })
    return `${c.post ? 'POST' : 'GET'} ${checkPage(res, `${c.post ? 'POST /api/keys' : 'GET /api'} with cookie ${cookie.slice(0, 200)}`)}`
  })
})
