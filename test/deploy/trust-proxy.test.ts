// Behind a reverse proxy: with TRUST_PROXY the client address in logs (and in
// request.ip, which the rate limits key on) comes from X-Forwarded-For; without
// it, or from an untrusted peer, the header is ignored. Streams carry the
// headers that keep proxies from buffering them.

import { join } from 'node:path'
import { Writable } from 'node:stream'
import t, { type Test } from 'tap'
import { Accounts } from '../../src/accounts/accounts.ts'
import { buildApp } from '../../src/app.ts'
import { loadConfig } from '../../src/config.ts'
import { ModelRegistry } from '../../src/engine/registry.ts'
import { openMigratedDatabase } from '../../src/store/database.ts'
import { buildTestApp, chatBody } from '../helpers/app.ts'

/** The client address the app logs for one request from `peer` that says it forwards for 203.0.113.7. */
async function loggedClient (t: Test, trustProxy: string, peer: string): Promise<{ logged: unknown; ip: string }> {
  const dir = t.testdir()
  const config = loadConfig({ DATABASE_URL: `sqlite://${join(dir, 'chatd.db')}`, LOG_LEVEL: 'info', TRUST_PROXY: trustProxy })
  const db = await openMigratedDatabase(config.database)
  const logs: Array<Record<string, any>> = []
  const logStream = new Writable({
    write (chunk, _enc, done) {
      for (const line of String(chunk).split('\n').filter(Boolean)) logs.push(JSON.parse(line))
      done()
    },
  })
  const app = await buildApp({ config, accounts: new Accounts(db), models: new ModelRegistry([]), logStream })
  let ip = ''
  app.addHook('onRequest', async request => { ip = request.ip })
  t.teardown(async () => {
    await app.close()
    await db.destroy()
  })
  await app.inject({ url: '/healthz', remoteAddress: peer, headers: { 'x-forwarded-for': '203.0.113.7' } })
  return { logged: logs.find(l => l.msg === 'incoming request')?.req?.remoteAddress, ip }
}

t.test('TRUST_PROXY decides whose X-Forwarded-For is believed', async t => {
  t.same(await loggedClient(t, 'false', '10.0.0.2'), { logged: '10.0.0.2', ip: '10.0.0.2' }, 'default: the peer address')
  t.same(await loggedClient(t, 'true', '10.0.0.2'), { logged: '203.0.113.7', ip: '203.0.113.7' }, 'true: the forwarded client')
  t.same(await loggedClient(t, '1', '10.0.0.2'), { logged: '203.0.113.7', ip: '203.0.113.7' }, 'a hop count')
  t.same(await loggedClient(t, '10.0.0.0/8, 127.0.0.1', '10.0.0.2'), { logged: '203.0.113.7', ip: '203.0.113.7' }, 'a trusted proxy subnet')
  t.same(await loggedClient(t, '172.16.0.0/12', '10.0.0.2'), { logged: '10.0.0.2', ip: '10.0.0.2' }, 'a peer outside the trusted list is not believed')
})

t.test('TRUST_PROXY values are checked at start', async t => {
  t.throws(() => loadConfig({ TRUST_PROXY: 'yes please' }), { name: 'ConfigError', message: /TRUST_PROXY/ })
  t.same(loadConfig({ TRUST_PROXY: '2' }).trustProxy, 2)
  t.same(loadConfig({ TRUST_PROXY: '10.0.0.0/8,fd00::/8' }).trustProxy, ['10.0.0.0/8', 'fd00::/8'])
})

t.test('streamed replies tell proxies not to buffer them', async t => {
  const { app, auth } = await buildTestApp(t)
  const res = await app.inject({ method: 'POST', url: '/api/v1/chat/completions', headers: auth, payload: chatBody({ stream: true }) })
  t.equal(res.statusCode, 200)
  t.equal(res.headers['x-accel-buffering'], 'no')
  t.match(res.headers['cache-control'], /no-transform/)
  t.match(res.body, /data: \[DONE\]/)
})

t.test('deployment settings: defaults', async t => {
  t.match(loadConfig({}), { modelsDir: undefined, autoPull: true, hfEndpoint: 'https://huggingface.co', hfToken: undefined, trustProxy: false })
  t.match(loadConfig({ CHATD_AUTO_PULL: '0', HF_ENDPOINT: 'https://hf-mirror.example/', MODELS_DIR: '/models' }), { autoPull: false, hfEndpoint: 'https://hf-mirror.example', modelsDir: '/models' })
  const err = (() => { try { loadConfig({ HF_TOKEN: '', HF_ENDPOINT: 'ftp://x' }) } catch (e) { return e as Error } })()
  t.match(err?.message, /HF_ENDPOINT/)
})
