// The whole server as `chatd serve` starts it: first start prints the admin
// key once, a restart keeps accounts and keys, shutdown drains streams, and the
// real process exits cleanly on SIGTERM.

import { spawn } from 'node:child_process'
import { once } from 'node:events'
import { writeFileSync } from 'node:fs'
import { connect, createServer, type AddressInfo } from 'node:net'
import { join } from 'node:path'
import t, { type Test } from 'tap'
import OpenAI from 'openai'
import { run } from '../../src/cli.ts'
import { loadConfig, type Config } from '../../src/config.ts'
import { startServer } from '../../src/server.ts'
import { ScriptedBackend } from '../helpers/scripted-backend.ts'

const ROOT = new URL('../..', import.meta.url).pathname

function setup (t: Test, env: Record<string, string> = {}): Config {
  const dir = t.testdir({ 'models.json': JSON.stringify({ models: [{ id: 'stories', backend: 'onnx', path: '.' }] }) })
  return loadConfig({ PORT: '0', LOG_LEVEL: 'silent', DATABASE_URL: `sqlite://${join(dir, 'data', 'chatd.db')}`, MODELS_FILE: join(dir, 'models.json'), ...env })
}

const scripted = (opts: ConstructorParameters<typeof ScriptedBackend>[0] = {}) => ({ onnx: async () => new ScriptedBackend({ id: 'stories', ...opts }) })

function client (app: Awaited<ReturnType<typeof startServer>>, apiKey: string): OpenAI {
  const { port } = app.server.address() as AddressInfo
  return new OpenAI({ apiKey, baseURL: `http://127.0.0.1:${port}/api/v1`, maxRetries: 0 })
}

t.test('first start prints the admin key once; a restart keeps accounts and keys', async t => {
  const config = setup(t)
  let printed = ''
  const first = await startServer(config, { print: text => { printed += text }, factories: scripted(), logger: false })
  const adminKey = /sk-chatd-[A-Za-z0-9]{32}/.exec(printed)?.[0]
  t.ok(adminKey, 'the admin key was printed')
  t.match(printed, /Created admin account admin@localhost/)
  t.match(printed, /For the dashboard at \/api, give it a password: npx chatd accounts set-password --email admin@localhost\n/, 'and how to log into the dashboard')
  const reply = await client(first, adminKey!).chat.completions.create({ model: 'stories', messages: [{ role: 'user', content: 'hi' }] })
  t.equal(reply.choices[0].message.content, 'Once upon a time')
  await first.close()

  // Between runs, the CLI adds a key to the same database.
  process.env.DATABASE_URL = `sqlite://${config.database.kind === 'sqlite' ? config.database.path : ''}`
  let cliKey = ''
  await run(['keys', 'create', '--email', 'admin@localhost', '--name', 'from cli'], line => { cliKey = line })
  delete process.env.DATABASE_URL

  printed = ''
  const second = await startServer(config, { print: text => { printed += text }, factories: scripted(), logger: false })
  t.teardown(() => second.close())
  t.equal(printed, '', 'nothing printed on a database that has accounts')
  for (const key of [adminKey!, cliKey]) {
    const models = await client(second, key).models.list()
    t.same(models.data.map(m => m.id), ['stories'], 'keys still work after the restart')
  }
  const refused = await client(second, 'sk-chatd-' + 'x'.repeat(32)).models.list().catch((err: unknown) => err)
  t.ok(refused instanceof OpenAI.AuthenticationError, 'an unknown key is refused with 401')
})

t.test('CHATD_ADMIN_KEY is used on first start', async t => {
  const key = `sk-chatd-${'K3y'.repeat(10)}00`
  const config = setup(t, { CHATD_ADMIN_KEY: key, CHATD_ADMIN_EMAIL: 'ops@example.com' })
  let printed = ''
  const app = await startServer(config, { print: text => { printed += text }, factories: scripted(), logger: false })
  t.teardown(() => app.close())
  t.match(printed, /Created admin account ops@example.com with the key from CHATD_ADMIN_KEY/)
  t.notMatch(printed, key, 'a configured key is not echoed')
  t.equal((await client(app, key).models.list()).data.length, 1)
})

t.test('models load in the background; /readyz turns 200 when they are ready', async t => {
  let open!: () => void
  const gate = new Promise<void>(resolve => { open = resolve })
  const app = await startServer(setup(t), { print: () => {}, factories: scripted({ loadGate: gate }), logger: false })
  t.teardown(() => app.close())
  t.equal((await app.inject({ url: '/healthz' })).statusCode, 200, 'alive while loading')
  t.equal((await app.inject({ url: '/readyz' })).statusCode, 503)
  open()
  await gate
  await new Promise(resolve => setImmediate(resolve))
  t.equal((await app.inject({ url: '/readyz' })).statusCode, 200)
})

t.test('closing drains an in-flight stream', async t => {
  const words = Array.from({ length: 20 }, (_, i) => ` w${i}`)
  let printed = ''
  const app = await startServer(setup(t), { print: text => { printed += text }, factories: scripted({ words, delayMs: 25 }), logger: false })
  const key = /sk-chatd-[A-Za-z0-9]{32}/.exec(printed)![0]
  const stream = await client(app, key).chat.completions.create({ model: 'stories', messages: [{ role: 'user', content: 'x' }], stream: true })
  let text = ''
  let closing: Promise<void> | undefined
  let finish
  for await (const chunk of stream) {
    text += chunk.choices[0]?.delta.content ?? ''
    finish = chunk.choices[0]?.finish_reason ?? finish
    closing ??= app.close() // shut down as soon as the stream has started
  }
  const started = performance.now()
  await closing
  t.ok(performance.now() - started < 2000, 'close() returns promptly once the stream has ended (no keep-alive wait)')
  t.equal(text, words.join(''), 'the whole reply arrived')
  t.equal(finish, 'stop')
})

t.test('while draining, a request on a busy connection gets the API\'s 503 body', async t => {
  let printed = ''
  const app = await startServer(setup(t), { print: text => { printed += text }, factories: scripted({ words: ['a', 'b', 'c', 'd', 'e'], delayMs: 40 }), logger: false })
  const key = /sk-chatd-[A-Za-z0-9]{32}/.exec(printed)![0]
  const { port } = app.server.address() as AddressInfo
  const socket = connect(port, '127.0.0.1')
  let received = ''
  socket.on('data', chunk => { received += chunk })
  const body = JSON.stringify({ model: 'stories', messages: [{ role: 'user', content: 'x' }], stream: true })
  socket.write(`POST /api/v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${key}\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`)
  while (!received.includes('data:')) await new Promise(resolve => setTimeout(resolve, 5))
  const closing = app.close()
  await new Promise(resolve => setTimeout(resolve, 20))
  // A second request on the same, still busy, keep-alive connection.
  socket.write('GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n')
  await once(socket, 'close')
  await closing
  t.match(received, /data: \[DONE\]/, 'the stream finished')
  const second = received.slice(received.lastIndexOf('HTTP/1.1 '))
  t.match(second, /^HTTP\/1\.1 503/)
  t.match(second, /connection: close/i)
  t.match(second, /"code":"server_overloaded"/)
  t.match(second, /shutting down/)
})

t.test('closing ends a connection that has not sent a request (Node\'s close() leaves it open)', async t => {
  let printed = ''
  const app = await startServer(setup(t), { print: text => { printed += text }, factories: scripted({ words: ['a', 'b', 'c', 'd', 'e'], delayMs: 40 }), logger: false })
  const key = /sk-chatd-[A-Za-z0-9]{32}/.exec(printed)![0]
  const { port } = app.server.address() as AddressInfo
  // One connection streaming, one used once and idle, one that never sent anything
  // (undici opens one like that after a stream it abandoned closes its socket).
  const busy = connect(port, '127.0.0.1')
  let received = ''
  busy.on('data', chunk => { received += chunk })
  const body = JSON.stringify({ model: 'stories', messages: [{ role: 'user', content: 'x' }], stream: true })
  busy.write(`POST /api/v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${key}\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`)
  const used = connect(port, '127.0.0.1')
  let usedReply = ''
  used.on('data', chunk => { usedReply += chunk })
  used.write('GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n')
  const silent = connect(port, '127.0.0.1')
  silent.on('error', () => {})
  await once(silent, 'connect')
  while (!received.includes('data:') || !usedReply.includes('\r\n\r\n')) await new Promise(resolve => setTimeout(resolve, 5))

  const started = performance.now()
  let timer: NodeJS.Timeout | undefined
  const outcome = await Promise.race([
    Promise.all([app.close(), once(busy, 'close'), once(used, 'close'), once(silent, 'close')]).then(() => 'closed' as const),
    new Promise<'hung'>(resolve => { timer = setTimeout(resolve, 5000, 'hung') }),
  ]).finally(() => clearTimeout(timer))
  if (outcome === 'hung') silent.destroy() // lets the hung close() end
  await app.close()
  t.equal(outcome, 'closed', 'close() and every connection ended within 5 s')
  t.ok(performance.now() - started < 2000, 'promptly')
  t.match(received, /data: \[DONE\]/, 'the stream in flight still finished')
})

t.test('a bad models.json stops start-up with the entry named', async t => {
  const dir = t.testdir({ 'models.json': '{"models":[{"id":"x","backend":"onnx"}]}' })
  const config = loadConfig({ PORT: '0', LOG_LEVEL: 'silent', DATABASE_URL: `sqlite://${join(dir, 'chatd.db')}`, MODELS_FILE: join(dir, 'models.json') })
  await t.rejects(startServer(config, { print: () => {}, logger: false }), { name: 'ModelsFileError', message: /models\[0\] \(id "x"\): missing "path"/ })
})

t.test('a start that fails (bad models.json, missing tiers file, port taken) prints no admin key; the next good start does', async t => {
  const dir = t.testdir({ 'bad.json': '{"models":[{"id":"x","backend":"onnx"}]}', 'models.json': JSON.stringify({ models: [{ id: 'stories', backend: 'onnx', path: '.' }] }) })
  const env = { PORT: '0', LOG_LEVEL: 'silent', DATABASE_URL: `sqlite://${join(dir, 'chatd.db')}`, MODELS_FILE: join(dir, 'models.json') }
  let printed = ''
  const print = (text: string) => { printed += text }
  await t.rejects(startServer(loadConfig({ ...env, MODELS_FILE: join(dir, 'bad.json') }), { print, factories: scripted(), logger: false }), { name: 'ModelsFileError' })
  t.equal(printed, '', 'bad models.json: no key printed')
  await t.rejects(startServer(loadConfig({ ...env, TIERS_FILE: join(dir, 'missing-tiers.json') }), { print, factories: scripted(), logger: false }), { name: 'TiersFileError', message: /missing-tiers\.json: cannot be read/ })
  t.equal(printed, '', 'missing tiers file: no key printed')
  const taken = createServer()
  taken.listen(0, '127.0.0.1')
  await once(taken, 'listening')
  t.teardown(() => taken.close())
  await t.rejects(startServer(loadConfig({ ...env, PORT: String((taken.address() as AddressInfo).port) }), { print, factories: scripted(), logger: false }), { code: 'EADDRINUSE' })
  t.equal(printed, '', 'port in use: no key printed')

  const app = await startServer(loadConfig(env), { print, factories: scripted(), logger: false })
  t.teardown(() => app.close())
  const key = /sk-chatd-[A-Za-z0-9]{32}/.exec(printed)?.[0]
  t.ok(key, 'the first start that succeeds creates the admin and prints its key')
  t.equal((await client(app, key!).models.list()).data.length, 1, 'and the key works')
})

t.test('models.json and tiers.json default to chatd\'s own directory, whatever the working directory', async t => {
  const config = loadConfig({})
  t.equal(config.modelsFile, join(ROOT, 'models', 'models.json'))
  t.equal(config.tiersFile, join(ROOT, 'tiers.json'))
  // Explicit relative values are the operator's, taken from the working directory.
  t.equal(loadConfig({ MODELS_FILE: 'mine/models.json', TIERS_FILE: 'mine/tiers.json' }).modelsFile, 'mine/models.json')
  t.equal(loadConfig({ TIERS_FILE: 'mine/tiers.json' }).tiersFile, 'mine/tiers.json')

  // From another directory, with the defaults: the shipped files are found (test/api/newcomer.test.ts runs the whole server that way).
  const elsewhere = t.testdir({})
  const cwd = process.cwd()
  process.chdir(elsewhere)
  t.teardown(() => process.chdir(cwd))
  let printed = ''
  const app = await startServer(loadConfig({ PORT: '0', LOG_LEVEL: 'silent', DATABASE_URL: `sqlite://${join(elsewhere, 'chatd.db')}`, MODELS_DIR: join(elsewhere, 'no-models') }), { print: text => { printed += text }, factories: scripted(), logger: false })
  t.teardown(() => app.close())
  t.match(printed, /Created admin account/)
})

t.test('`chatd serve` as a process: listens, answers, exits cleanly on SIGTERM', async t => {
  const dir = t.testdir()
  writeFileSync(join(dir, 'models.json'), JSON.stringify({ models: [{ id: 'absent', backend: 'onnx', path: 'nowhere' }] }))
  const child = spawn(process.execPath, ['bin/chatd.js', 'serve'], {
    cwd: ROOT,
    env: { ...process.env, PORT: '0', HOST: '127.0.0.1', LOG_LEVEL: 'info', DATABASE_URL: `sqlite://${join(dir, 'chatd.db')}`, MODELS_FILE: join(dir, 'models.json') },
    stdio: ['ignore', 'pipe', 'pipe'],
  })
  t.teardown(() => { if (child.exitCode === null) child.kill('SIGKILL') })
  let stdout = ''
  child.stdout.on('data', chunk => { stdout += chunk })
  let stderr = ''
  child.stderr.on('data', chunk => { stderr += chunk })
  const deadline = Date.now() + 20000
  // The key is printed once the server listens, on a line of its own: wait for both.
  while (!(/listening at http:\/\/127\.0\.0\.1:\d+/.test(stdout) && /sk-chatd-[A-Za-z0-9]{32}/.test(stdout)) && Date.now() < deadline) await new Promise(resolve => setTimeout(resolve, 50))
  const port = Number(/listening at http:\/\/127\.0\.0\.1:(\d+)/.exec(stdout)?.[1])
  t.ok(port, `listening (stderr: ${stderr})`)
  const key = /sk-chatd-[A-Za-z0-9]{32}/.exec(stdout)?.[0]
  t.ok(key, 'printed the admin key')

  const res = await fetch(`http://127.0.0.1:${port}/api/v1/chat/completions`, {
    method: 'POST',
    headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'absent', messages: [{ role: 'user', content: 'hi' }] }),
  })
  t.equal(res.status, 400)
  t.match(((await res.json()) as { error: unknown }).error, { code: 'model_out_of_service', message: /put the model directory .* at .*nowhere, or add "hubRepo"/ })
  t.equal((await fetch(`http://127.0.0.1:${port}/readyz`)).status, 503, 'its only model cannot answer: not ready')

  const logLines = stdout.split('\n').filter(line => line.startsWith('{'))
  t.ok(logLines.some(line => /"model unavailable"/.test(line)), 'the unavailable model is logged at start')
  t.notOk(logLines.some(line => line.includes(key!)), 'the key is in no log line')

  child.kill('SIGTERM')
  const [code] = await once(child, 'exit')
  t.equal(code, 0)
  t.match(stdout, /shutting down/)
})
