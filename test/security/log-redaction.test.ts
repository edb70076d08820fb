// The logger options by themselves (src/logging.ts): what any code that logs
// gets redacted, without a server around it; then a server's log of keys and
// tokens sent in paths, percent-encoded, and of form values in the wrong
// field. secrets.test.ts checks the same through a whole session.

import { join } from 'node:path'
import { Writable } from 'node:stream'
import t from 'tap'
import pino from 'pino'
import { Accounts } from '../../src/accounts/accounts.ts'
import { buildApp } from '../../src/app.ts'
import { loadConfig } from '../../src/config.ts'
import { ModelRegistry } from '../../src/engine/registry.ts'
import { openMigratedDatabase } from '../../src/store/database.ts'
import { Browser } from '../dashboard/jar.ts'
import { ScriptedBackend } from '../helpers/scripted-backend.ts'
import { loggedIn } from './people.ts'
import { loggableUrl, loggerOptions, maskApiKeys, percentDecode, redactSecretLooking } from '../../src/logging.ts'

const KEY = 'sk-chatd-AbCdEf0123456789abcdefghijklmnop'

function capture (): { logger: pino.Logger; lines: () => Array<Record<string, unknown>>; text: () => string } {
  let text = ''
  const stream = new Writable({ write (chunk, _encoding, done) { text += String(chunk); done() } })
  const logger = pino(loggerOptions('trace', stream) as pino.LoggerOptions, stream)
  return { logger, text: () => text, lines: () => text.split('\n').filter(Boolean).map(line => JSON.parse(line)) }
}

t.test('loggableUrl keeps the path and the parameter names, never a value', async t => {
  t.equal(loggableUrl('/api/v1/models'), '/api/v1/models')
  t.equal(loggableUrl(`/api/v1/models?api_key=${KEY}`), '/api/v1/models?api_key=[Redacted]')
  t.equal(loggableUrl('/api?done=revoked&token=abc&&x'), '/api?done=[Redacted]&token=[Redacted]&x=[Redacted]')
  t.equal(loggableUrl('/api?'), '/api?')
})

t.test('maskApiKeys cuts every chatd key in a line to its prefix, and leaves the rest alone', async t => {
  t.equal(maskApiKeys(`{"msg":"The model '${KEY}' does not exist","other":"${KEY}"}`), '{"msg":"The model \'sk-chatd-AbCdEf…\' does not exist","other":"sk-chatd-AbCdEf…"}')
  t.equal(maskApiKeys('sk-chatd-AbCdEf… is listed by its prefix'), 'sk-chatd-AbCdEf… is listed by its prefix')
  t.equal(maskApiKeys('no key here'), 'no key here')
})

t.test('whatever is logged, credentials come out redacted or cut', async t => {
  const { logger, lines, text } = capture()
  logger.info({ req: { headers: { authorization: `Bearer ${KEY}` } } }, 'a bare request-like object')
  logger.info({ headers: { authorization: `Bearer ${KEY}`, cookie: 'chatd_session=abc', 'x-api-key': KEY } }, 'headers')
  logger.info({ password: 'hunter2 hunter2', token: 'session-token', apiKey: 'upstream-key', key: KEY }, 'fields')
  logger.warn(new Error(`refused ${KEY}`))
  logger.trace(`a message naming ${KEY}`)
  const logged = lines()
  t.equal(logged.length, 5, 'a request-like object without a URL is logged, not thrown on')
  t.same(logged[1].headers, { authorization: '[Redacted]', cookie: '[Redacted]', 'x-api-key': '[Redacted]' })
  t.match(logged[2], { password: '[Redacted]', token: '[Redacted]', apiKey: '[Redacted]', key: '[Redacted]' })
  t.notMatch(text(), KEY.slice(15), 'the secret part of the key is nowhere, not in an error\'s message or stack either')
  t.notMatch(text(), /hunter2|session-token|upstream-key|chatd_session=abc/)
  t.match(logged[4].msg, 'sk-chatd-AbCdEf…')
})

t.test('percent-encoded keys are found and cut, however often encoded', async t => {
  const secret = KEY.slice(15)
  const once = KEY.replace('Ef0', '%45f0') // sk-chatd-AbCd%45f0...: "E" encoded
  const everything = [...KEY].map(c => `%${c.charCodeAt(0).toString(16).padStart(2, '0')}`).join('')
  const twice = once.replace('%45', '%2545')
  for (const [label, encoded] of [['one letter', once], ['every character, dashes too', everything], ['encoded twice', twice], ['lower-case hex', everything.toLowerCase()]]) {
    const line = JSON.stringify({ msg: `GET /api/v1/models/${encoded}?x=1`, other: `"${encoded}"` })
    const masked = maskApiKeys(line)
    t.notMatch(percentDecode(percentDecode(masked)), secret, `${label}: the secret is gone`)
    t.match(masked, 'sk-chatd-AbCdEf…', `${label}: the prefix stays, decoded`)
    t.doesNotThrow(() => JSON.parse(masked), `${label}: still a JSON line`)
  }
  t.equal(maskApiKeys('{"msg":"100%25 sure, %E0 broken %zz"}'), '{"msg":"100%25 sure, %E0 broken %zz"}', 'other escapes left as they were')
})

t.test('loggableUrl drops path segments that look like secrets, decoded first', async t => {
  t.equal(loggableUrl('/api/v1/models/sk-chatd-USf%42UHjabcdefghijabcdefghijabcd'), '/api/v1/models/[Redacted]', 'the probe\'s path')
  t.equal(loggableUrl(`/api/v1/models/${KEY}`), '/api/v1/models/[Redacted]')
  t.equal(loggableUrl('/api/v1/models/ghp_A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8'), '/api/v1/models/[Redacted]', 'another provider\'s token')
  t.equal(loggableUrl('/reset/0123456789abcdef0123456789abcdef01234567'), '/reset/[Redacted]', 'a hex token')
  t.equal(loggableUrl('/x/%65yJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.abc'), '/x/[Redacted]', 'a JWT')
  t.equal(loggableUrl('/api/v1/models/sk-chatd-USfBUH%E2%80%A6?token=%73k-chatd-x'), '/api/v1/models/sk-chatd-USfBUH%E2%80%A6?token=[Redacted]', 'a display prefix is not a secret')
  for (const path of ['/api/v1/models/deepseek-r1-distill-qwen-1.5b', '/api/v1/models/Mistral-7B-Instruct-v0.3', '/api/v1/models/Qwen2.5-Coder-32B-Instruct', '/api/v1/chat/completions', '/api/assets/dashboard.css', '/api/v1/models/llama3%3A8b']) {
    t.equal(loggableUrl(path), path, `${path} stays`)
  }
  t.equal(loggableUrl(`/api?${encodeURIComponent(KEY)}=1&done=x`), '/api?[Redacted]=[Redacted]&done=[Redacted]', 'a key as a query parameter name')
})

t.test('redactSecretLooking: refusal messages keep their words, not their tokens', async t => {
  t.equal(redactSecretLooking('The model \'ghp_A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8\' does not exist.'), 'The model \'ghp_[Redacted]\' does not exist.')
  t.equal(redactSecretLooking(`The model '${KEY}' does not exist.`), 'The model \'sk-chatd-AbCdEf…\' does not exist.')
  t.equal(redactSecretLooking('Invalid value for \'messages[0].content\': must be string.'), 'Invalid value for \'messages[0].content\': must be string.')
})

t.test('a server at trace level logs no key or token sent in a path, however encoded, and no form value', async t => {
  const dir = t.testdir()
  const config = loadConfig({ DATABASE_URL: `sqlite://${join(dir, 'chatd.db')}`, LOG_LEVEL: 'trace' })
  const db = await openMigratedDatabase(config.database)
  t.teardown(() => db.destroy())
  const accounts = new Accounts(db)
  const admin = await accounts.create({ email: 'root@example.com', isAdmin: true, tier: 'unlimited' })
  await accounts.setPassword(admin.id, 'root password')
  const { key } = await accounts.createKey(admin.id)
  let text = ''
  const stream = new Writable({ write (chunk, _encoding, done) { text += String(chunk); done() } })
  const app = await buildApp({ config, accounts, models: new ModelRegistry([{ id: 'scripted', backend: new ScriptedBackend() }]), logStream: stream })
  t.teardown(() => app.close())
  const auth = { authorization: `Bearer ${key}` }

  const token = 'ghp_A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8'
  const encodedKey = key.slice(0, 18) + [...key.slice(18)].map(c => `%${c.charCodeAt(0).toString(16)}`).join('')
  for (const url of [`/api/v1/models/${encodedKey}`, `/api/v1/models/${encodedKey.replaceAll('%', '%25')}`, `/api/v1/models/${token}`, `/api/v1/models/${encodeURIComponent(token)}`, `/nowhere/${encodedKey}`, `/api/v1/models?${encodedKey}`]) {
    const res = await app.inject({ method: 'GET', url, headers: auth })
    t.ok(res.statusCode === 404 || res.statusCode === 200, `${url.slice(0, 40)}…: answered`)
  }
  await app.inject({ method: 'POST', url: '/api/v1/chat/completions', headers: auth, payload: { model: token, messages: [{ role: 'user', content: 'hi' }] } })

  // A password typed into the wrong field: the email field when registering, the tier on the admin page.
  const typo = 'Hunter2-wrong-FIELD-9'
  const visitor = new Browser(app)
  t.equal((await visitor.post('/api/register', { email: typo, password: 'some password', confirm: 'some password' }, { csrfFrom: '/api/register' })).statusCode, 400)
  const root = await loggedIn(app, 'root@example.com', 'root password')
  t.equal((await root.post('/api/admin/tier', { account: String(admin.id), tier: typo }, { csrfFrom: '/api/admin' })).statusCode, 400)

  await app.close()
  const decoded = percentDecode(percentDecode(text))
  t.ok(text.includes('[Redacted]'), 'the paths were logged, redacted')
  t.notMatch(decoded, key.slice(15), 'no key\'s secret part, decoded or not')
  t.notMatch(decoded, token.slice(8), 'no other token')
  t.notMatch(decoded, typo, 'no form value')
})
