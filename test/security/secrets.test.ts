// Secrets never reach logs, errors or metrics. The whole server, as `chatd
// serve` starts it (startServer), logs at trace level into a stream the test
// reads, through a realistic session: register, log out and in (also with a
// wrong password), create a key on the dashboard, use it (fine, streamed,
// wrong, malformed, sent in a query string, in an X-Api-Key header, as a
// model id and inside a broken JSON body), call two upstream models whose
// server echoes chatd's upstream key back in its errors, search with a Brave
// key whose server echoes it too, read the usage, revoke the key, change the
// password, use the admin pages, make a key with the CLI, and read /metrics,
// /readyz and the OpenAPI document.
//
// Then every log line, every response (status, headers, body), the metrics
// text and the CLI's and first start's output are searched for every secret
// of the session: each key's secret part (its prefix is public), each
// password, session cookie and CSRF cookie value, CSRF token, the upstream
// and search API keys, SESSION_SECRET and HF_TOKEN, and the hashes the
// database stores (API keys' and sessions' SHA-256, passwords' Argon2 salt
// and hash). A secret may appear only where it must: a new key on the page
// that creates it, in the CLI's output and in the first start's message; a
// cookie value in its own Set-Cookie header; a CSRF token in the HTML form it
// belongs to; and a response may echo what its own request sent (a model id
// that is not one). Everything else is a leak, named in the failure.

import { join } from 'node:path'
import { Writable } from 'node:stream'
import t from 'tap'
import type { FastifyInstance, InjectOptions, LightMyRequestResponse } from 'fastify'
import { run } from '../../src/cli.ts'
import { loadConfig } from '../../src/config.ts'
import { startServer } from '../../src/server.ts'
import { openMigratedDatabase } from '../../src/store/database.ts'
import { Accounts } from '../../src/accounts/accounts.ts'
import { apiKeyPrefix } from '../../src/accounts/api-key-format.ts'
import { ScriptedBackend } from '../helpers/scripted-backend.ts'
import { loopbackServer, sseData, sseHead, chunk } from '../upstream/loopback.ts'
import { Browser, csrfToken } from '../dashboard/jar.ts'

/** Something the test looked at: a log, a response's parts, an output. */
interface Artifact {
  label: string
  kind: 'log' | 'status-and-headers' | 'set-cookie' | 'body' | 'html-body' | 'output'
  text: string
  /** Secret values this artifact is meant to show (a new key on its page, a value its own request sent). */
  shows: string[]
}

interface Secret {
  name: string
  value: string
  /** Where, besides artifacts that show it, the secret may appear. */
  allowedIn: Array<Artifact['kind']>
}

const UPSTREAM_KEY = 'sk-upstream-UPSTREAMSECRET0123456789'
const BRAVE_KEY = 'BSA-brave-SEARCHSECRET0123456789'
const SESSION_SECRET = 'session-secret-SESSIONSECRET0123456789abcdef'
const HF_TOKEN = 'hf_HFTOKENSECRET0123456789'
const ANN = { email: 'ann@example.com', password: 'Ann-first-PASSWORD-1' }
const ANN_NEW_PASSWORD = 'Ann-second-PASSWORD-2'
const WRONG_PASSWORD = 'Wrong-guess-PASSWORD-3'
const ADMIN_PASSWORD = 'Admin-PASSWORD-4'

t.test('no secret reaches a log line, a response or the metrics', async t => {
  // Servers that echo every credential they are sent, as a careless or hostile one might.
  const upstream = await loopbackServer(t, (req, res, recorded) => {
    const sent = String(req.headers.authorization)
    if (recorded.path.startsWith('/refuses/')) {
      res.writeHead(401, { 'content-type': 'application/json' })
      res.end(JSON.stringify({ error: { message: `Incorrect API key provided: ${sent}`, code: 'invalid_api_key' } }))
      return
    }
    sseHead(res)
    sseData(res, chunk({ role: 'assistant', content: 'Hel' }))
    sseData(res, { error: { message: `quota exceeded for ${sent}` } })
    res.end()
  })
  const brave = await loopbackServer(t, (req, res) => {
    res.writeHead(403, { 'content-type': 'application/json' })
    res.end(JSON.stringify({ error: `subscription token ${String(req.headers['x-subscription-token'])} is not valid` }))
  })

  const dir = t.testdir({
    'models.json': JSON.stringify({
      models: [
        { id: 'scripted', backend: 'onnx', path: '.' },
        { id: 'refusing-upstream', backend: 'openai', baseUrl: `${upstream.url}/refuses/v1`, apiKey: '${UPSTREAM_API_KEY}', upstreamModel: 'm' },
        { id: 'failing-upstream', backend: 'openai', baseUrl: `${upstream.url}/fails/v1`, apiKey: '${UPSTREAM_API_KEY}', upstreamModel: 'm' },
      ],
    }),
    'tiers.json': JSON.stringify({ default: 'free', tiers: { free: { requests_per_minute: 1000, calls_per_month: 1000 }, pro: {}, unlimited: {} } }),
  })
  const database = `sqlite://${join(dir, 'chatd.db')}`
  const env = {
    PORT: '0',
    LOG_LEVEL: 'trace',
    DATABASE_URL: database,
    MODELS_FILE: join(dir, 'models.json'),
    TIERS_FILE: join(dir, 'tiers.json'),
    CHATD_AUTO_PULL: '0',
    UPSTREAM_RETRIES: '0',
    SEARCH_PROVIDER: 'brave',
    BRAVE_API_KEY: BRAVE_KEY,
    BRAVE_SEARCH_URL: `${brave.url}/res/v1/web/search`,
    SESSION_SECRET,
    HF_TOKEN,
  }

  let logged = ''
  const logStream = new Writable({ write (chunk, _encoding, done) { logged += String(chunk); done() } })
  let printed = ''
  const app = await startServer(loadConfig(env), {
    print: text => { printed += text },
    env: { UPSTREAM_API_KEY: UPSTREAM_KEY },
    factories: { onnx: async () => new ScriptedBackend({ id: 'scripted' }) },
    logStream,
  })
  let closed = false
  t.teardown(async () => { if (!closed) await app.close() })

  const artifacts: Artifact[] = []
  const secrets: Secret[] = []
  const secret = (name: string, value: string, allowedIn: Secret['allowedIn'] = []): void => { secrets.push({ name, value, allowedIn }) }

  /** app.inject that files the response's parts as artifacts. */
  const inject = async (opts: InjectOptions, shows: string[] = []): Promise<LightMyRequestResponse> => {
    const res = await app.inject(opts)
    const label = `${opts.method ?? 'GET'} ${opts.url} -> ${res.statusCode}`
    const { 'set-cookie': setCookie, ...headers } = res.headers
    artifacts.push({ label: `${label} (status and headers)`, kind: 'status-and-headers', text: `${res.statusCode} ${JSON.stringify(headers)}`, shows })
    artifacts.push({ label: `${label} (Set-Cookie)`, kind: 'set-cookie', text: [setCookie ?? []].flat().join('\n'), shows })
    const html = String(res.headers['content-type']).startsWith('text/html')
    artifacts.push({ label: `${label} (body)`, kind: html ? 'html-body' : 'body', text: res.body, shows })
    for (const c of res.cookies as Array<{ name: string; value: string }>) {
      if (c.value !== '') secret(`cookie ${c.name} from ${label}`, c.value, ['set-cookie'])
    }
    if (html) for (const m of res.body.matchAll(/name="_csrf" value="([^"]+)"/g)) secret(`CSRF token on ${label}`, m[1], ['html-body'])
    return res
  }
  // Browsers whose every request goes through the recording inject.
  const recording = { inject: (opts: InjectOptions) => inject(opts) } as unknown as FastifyInstance
  const bearer = (key: string) => ({ authorization: `Bearer ${key}` })
  const chat = (key: string, body: Record<string, unknown>, shows: string[] = []) =>
    inject({ method: 'POST', url: '/api/v1/chat/completions', headers: bearer(key), payload: { model: 'scripted', messages: [{ role: 'user', content: 'Tell me a story' }], ...body } }, shows)

  // --- first start: the admin key is printed, once ---
  const adminKey = /sk-chatd-[A-Za-z0-9]{32}/.exec(printed)?.[0]
  t.ok(adminKey, 'the first start printed the admin key')
  secret('the admin key (secret part)', adminKey!.slice(15))
  artifacts.push({ label: 'first-start message', kind: 'output', text: printed, shows: [adminKey!.slice(15)] })

  // --- register, log out, log in (wrongly, then rightly) ---
  const ann = new Browser(recording)
  await ann.get('/api/login')
  t.equal((await ann.post('/api/register', { ...ANN, confirm: ANN.password }, { csrfFrom: '/api/register' })).statusCode, 303)
  await ann.get('/api')
  t.equal((await ann.post('/api/logout', {}, { csrfFrom: '/api' })).statusCode, 303)
  t.equal((await ann.post('/api/login', { email: ANN.email, password: WRONG_PASSWORD }, { csrfFrom: '/api/login' })).statusCode, 401)
  t.equal((await ann.post('/api/login', ANN, { csrfFrom: '/api/login' })).statusCode, 303)

  // --- a key made on the dashboard, shown once ---
  const keyToken = csrfToken((await ann.get('/api')).body)
  const created = await app.inject({
    method: 'POST',
    url: '/api/keys',
    headers: { cookie: [...ann.cookies].map(([k, v]) => `${k}=${v}`).join('; '), 'content-type': 'application/x-www-form-urlencoded' },
    payload: new URLSearchParams({ name: 'laptop', _csrf: keyToken }).toString(),
  })
  const key = /<code id="new-key" class="key">(sk-chatd-[A-Za-z0-9]{32})<\/code>/.exec(created.body)![1]
  const keySecret = key.slice(15)
  secret('Ann\'s dashboard key (secret part)', keySecret)
  artifacts.push({ label: 'POST /api/keys (the page that shows the new key)', kind: 'html-body', text: created.body, shows: [keySecret] })
  artifacts.push({ label: 'POST /api/keys (status and headers)', kind: 'status-and-headers', text: JSON.stringify(created.headers), shows: [] })
  await ann.get('/api')

  // --- the key on the API: right, wrong, malformed, and in places keys do not go ---
  t.equal((await chat(key, {})).statusCode, 200)
  t.equal((await chat(key, { stream: true })).statusCode, 200)
  const wrongKey = key.slice(0, -1) + (key.endsWith('a') ? 'b' : 'a')
  secret('a wrong key with Ann\'s prefix (secret part)', wrongKey.slice(15))
  t.equal((await chat(wrongKey, {})).statusCode, 401)
  t.equal((await chat(key.slice(0, 30), {})).statusCode, 401, 'a truncated key')
  t.equal((await inject({ method: 'POST', url: '/api/v1/chat/completions', headers: { authorization: `Token ${key}` }, payload: {} })).statusCode, 401, 'the wrong scheme')
  t.equal((await inject({ url: `/api/v1/models?api_key=${key}` })).statusCode, 401, 'a key in the query string is not read')
  t.equal((await inject({ url: `/api/v1/usage?key=${key}&other=1` })).statusCode, 401)
  t.equal((await inject({ url: '/api/v1/models', headers: { 'x-api-key': key } })).statusCode, 401, 'nor in X-Api-Key')
  t.equal((await inject({ url: `/api/v1/models/${key}`, headers: bearer(key) }, [keySecret])).statusCode, 404, 'a key sent as a model id comes back to its sender only')
  t.equal((await chat(key, { model: key }, [keySecret])).statusCode, 404)
  t.equal((await inject({ method: 'POST', url: '/api/v1/chat/completions', headers: { ...bearer(key), 'content-type': 'application/json' }, payload: `{"api_key":"${key}" oops` }, [keySecret])).statusCode, 400, 'a broken JSON body')

  // --- upstream models whose server echoes chatd's upstream key ---
  t.equal((await chat(key, { model: 'refusing-upstream' })).statusCode, 502)
  t.equal((await chat(key, { model: 'failing-upstream' })).statusCode, 502)
  const streamed = await chat(key, { model: 'failing-upstream', stream: true })
  t.match(streamed.body, /upstream_error/, 'the stream ends with chatd\'s own error event')
  t.ok(upstream.requests.length >= 3 && upstream.requests.every(r => r.headers.authorization === `Bearer ${UPSTREAM_KEY}`), 'the upstream key was really sent upstream')
  secret('the upstream API key', UPSTREAM_KEY)
  secret('the upstream API key (without its scheme)', UPSTREAM_KEY.slice(12))

  // --- web search whose provider echoes the Brave key ---
  t.equal((await chat(key, { googleSearchStatus: true })).statusCode, 502)
  t.ok(brave.requests.length >= 1 && brave.requests.every(r => r.headers['x-subscription-token'] === BRAVE_KEY), 'the Brave key was really sent to the provider')
  secret('the Brave API key', BRAVE_KEY)

  // --- usage, models, the dashboard ---
  t.equal((await inject({ url: '/api/v1/usage', headers: bearer(key) })).statusCode, 200)
  t.equal((await inject({ url: '/api/v1/models', headers: bearer(key) })).statusCode, 200)
  t.match((await ann.get('/api')).body, `${apiKeyPrefix(key)}…`, 'the dashboard lists the key by its prefix')

  // --- revoke it ---
  t.equal((await ann.post('/api/keys/revoke', { prefix: apiKeyPrefix(key) }, { csrfFrom: '/api' })).statusCode, 303)
  t.equal((await chat(key, {})).statusCode, 401)

  // --- change the password (once wrongly) ---
  t.equal((await ann.post('/api/password', { current: WRONG_PASSWORD, new: ANN_NEW_PASSWORD, confirm: ANN_NEW_PASSWORD }, { csrfFrom: '/api/password' })).statusCode, 401)
  t.equal((await ann.post('/api/password', { current: ANN.password, new: ANN_NEW_PASSWORD, confirm: ANN_NEW_PASSWORD }, { csrfFrom: '/api/password' })).statusCode, 303)

  // --- the admin pages ---
  const db = await openMigratedDatabase({ kind: 'sqlite', path: join(dir, 'chatd.db') })
  t.teardown(() => db.destroy())
  const accounts = new Accounts(db)
  await accounts.setPassword((await accounts.getByEmail('admin@localhost')).id, ADMIN_PASSWORD)
  const admin = new Browser(recording)
  t.equal((await admin.post('/api/login', { email: 'admin@localhost', password: ADMIN_PASSWORD }, { csrfFrom: '/api/login' })).statusCode, 303)
  t.equal((await admin.get('/api/admin')).statusCode, 200)
  const annId = (await accounts.getByEmail(ANN.email)).id
  t.equal((await admin.post('/api/admin/tier', { account: String(annId), tier: 'pro' }, { csrfFrom: '/api/admin' })).statusCode, 303)
  t.equal((await inject({ url: '/api/v1/models', headers: bearer(adminKey!) })).statusCode, 200)

  // --- a key made with the CLI ---
  const saved = { ...process.env }
  Object.assign(process.env, env)
  t.teardown(() => { process.env = saved })
  const cli = async (args: string[]) => {
    let out = ''
    let err = ''
    const code = await run(args, line => { out += line + '\n' }, line => { err += line + '\n' })
    return { code, out, err }
  }
  const made = await cli(['keys', 'create', '--email', ANN.email, '--name', 'ci'])
  t.equal(made.code, 0)
  const cliKey = made.out.trim()
  t.match(cliKey, /^sk-chatd-[A-Za-z0-9]{32}$/, 'the CLI prints only the key')
  secret('the CLI-made key (secret part)', cliKey.slice(15))
  artifacts.push({ label: 'chatd keys create (stdout)', kind: 'output', text: made.out, shows: [cliKey.slice(15)] })
  artifacts.push({ label: 'chatd keys create (stderr)', kind: 'output', text: made.err, shows: [] })
  for (const args of [['keys', 'list', '--email', ANN.email], ['accounts', 'list'], ['keys', 'revoke', 'sk-chatd-nobody']]) {
    const { out, err } = await cli(args)
    artifacts.push({ label: `chatd ${args.join(' ')}`, kind: 'output', text: out + err, shows: [] })
  }
  process.env = saved
  t.equal((await chat(cliKey, {})).statusCode, 200, 'the CLI key works')

  // --- what operators and anyone may read ---
  const metrics = await inject({ url: '/metrics' })
  t.match(metrics.body, /chatd_http_requests_total/)
  await inject({ url: '/readyz' })
  await inject({ url: '/healthz' })
  await inject({ url: '/docs/json' })

  // --- what the database holds ---
  for (const row of await db.selectFrom('api_keys').select(['hash', 'prefix']).execute()) secret(`the stored hash of key ${row.prefix}`, row.hash)
  for (const row of await db.selectFrom('sessions').select('token_hash').execute()) secret('a stored session hash', row.token_hash)
  for (const row of await db.selectFrom('accounts').select(['email', 'password_hash']).execute()) {
    if (row.password_hash === null) continue
    const [salt, hash] = row.password_hash.split('$').slice(-2)
    secret(`${row.email}'s Argon2 salt`, salt)
    secret(`${row.email}'s Argon2 hash`, hash)
  }
  for (const [name, value] of [['Ann\'s first password', ANN.password], ['Ann\'s new password', ANN_NEW_PASSWORD], ['a wrong password', WRONG_PASSWORD], ['the admin password', ADMIN_PASSWORD], ['SESSION_SECRET', SESSION_SECRET], ['HF_TOKEN', HF_TOKEN]]) {
    secret(name, value)
  }

  t.equal(app.log.level, 'trace', 'everything was logged, down to trace level')
  await app.close()
  closed = true
  const lines = logged.split('\n').filter(Boolean)
  artifacts.push(...lines.map((line, i) => ({ label: `log line ${i + 1}`, kind: 'log' as const, text: line, shows: [] })))

  // The checks only mean something if the logs were really written, in full.
  t.ok(lines.length > 100, `${lines.length} log lines captured`)
  t.ok(lines.every(line => { try { JSON.parse(line); return true } catch { return false } }), 'every log line is still valid JSON')
  t.ok(lines.some(line => line.includes('"url":"/api/v1/models?api_key=[Redacted]"')), 'the query string is logged with its value redacted')
  t.ok(lines.some(line => line.includes(`${apiKeyPrefix(key)}…`)), 'a key echoed in an error message is logged as its prefix')
  t.ok(secrets.length > 40, `${secrets.length} secrets to look for`)

  const leaks: string[] = []
  for (const s of secrets) {
    for (const a of artifacts) {
      if (!a.text.includes(s.value) || a.shows.includes(s.value) || s.allowedIn.includes(a.kind)) continue
      leaks.push(`${s.name} in ${a.label}: ${a.text.slice(Math.max(0, a.text.indexOf(s.value) - 80), a.text.indexOf(s.value) + s.value.length + 20)}`)
    }
  }
  t.same(leaks, [], 'no secret where it does not belong')
})
