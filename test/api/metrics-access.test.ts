// Who may read /metrics, and where: METRICS_TOKEN requires a bearer token
// (401 in the API's error shape without it, whatever is sent instead), and
// METRICS_PORT serves /metrics on a listener of its own while the API port
// answers it 404. Without either, /metrics stays open as it always was.

import { join } from 'node:path'
import type { AddressInfo } from 'node:net'
import t, { type Test } from 'tap'
import { loadConfig } from '../../src/config.ts'
import { startServer } from '../../src/server.ts'
import { buildTestApp } from '../helpers/app.ts'
import { freePort } from '../helpers/chatd-process.ts'
import { ScriptedBackend } from '../helpers/scripted-backend.ts'

const TOKEN = 'metrics-0123456789abcdef0123456789'

t.test('METRICS_TOKEN: a scrape needs the bearer token', async t => {
  const { app } = await buildTestApp(t, { env: { METRICS_TOKEN: TOKEN } })
  const open = await app.inject({ url: '/metrics' })
  t.equal(open.statusCode, 401)
  t.equal(open.json().error.code, 'missing_api_key')
  t.match(open.headers['www-authenticate'], /^Bearer/)
  t.notMatch(open.body, /chatd_|vllm:/, 'nothing of the metrics in the refusal')
  for (const authorization of [`Bearer ${TOKEN}x`, `Bearer ${TOKEN.slice(0, -1)}`, 'Bearer ' + 'a'.repeat(60_000), `Basic ${TOKEN}`, `Bearer ${TOKEN} extra`, `bearer  ${TOKEN.toUpperCase()}`]) {
    const res = await app.inject({ url: '/metrics', headers: { authorization } })
    t.equal(res.statusCode, 401, `refused: ${authorization.slice(0, 40)}`)
    t.match(res.json().error.code, /^(missing|invalid)_api_key$/)
  }
  const ok = await app.inject({ url: '/metrics', headers: { authorization: `Bearer ${TOKEN}` } })
  t.equal(ok.statusCode, 200)
  t.match(ok.body, /vllm:num_requests_running/)
  t.equal((await app.inject({ url: '/metrics', headers: { authorization: `bearer   ${TOKEN}  ` } })).statusCode, 200, 'the scheme in any case, spaces around')
})

t.test('METRICS_TOKEN must be long enough, and is never echoed in the error', async t => {
  t.throws(() => loadConfig({ METRICS_TOKEN: 'short-secret' }), /METRICS_TOKEN: must be at least 16 characters$/m)
  try {
    loadConfig({ METRICS_TOKEN: 'has a space in it, so it is refused' })
    t.fail('refused')
  } catch (err) {
    t.match((err as Error).message, /METRICS_TOKEN: must be printable ASCII characters without spaces/)
    t.notMatch((err as Error).message, /has a space/)
  }
})

async function serverWith (t: Test, env: Record<string, string>) {
  const dir = t.testdir({ 'models.json': JSON.stringify({ models: [{ id: 'stories', backend: 'onnx', path: '.' }] }) })
  const app = await startServer(loadConfig({ PORT: '0', LOG_LEVEL: 'silent', DATABASE_URL: `sqlite://${join(dir, 'chatd.db')}`, MODELS_FILE: join(dir, 'models.json'), ...env }), {
    print: () => {},
    logger: false,
    factories: { onnx: async () => new ScriptedBackend({ id: 'stories' }) },
  })
  t.teardown(() => app.close())
  return { app, url: `http://127.0.0.1:${(app.server.address() as AddressInfo).port}` }
}

t.test('METRICS_PORT: /metrics on its own listener, not on the API port', async t => {
  const port = await freePort()
  const { app, url } = await serverWith(t, { METRICS_PORT: String(port), METRICS_TOKEN: TOKEN })
  const onApi = await fetch(`${url}/metrics`, { headers: { authorization: `Bearer ${TOKEN}` } })
  t.equal(onApi.status, 404, 'the API port does not serve it')
  const metricsUrl = `http://127.0.0.1:${port}`
  t.equal((await fetch(`${metricsUrl}/metrics`)).status, 401, 'the token applies there too')
  const scraped = await fetch(`${metricsUrl}/metrics`, { headers: { authorization: `Bearer ${TOKEN}` } })
  t.equal(scraped.status, 200)
  t.match(await scraped.text(), /vllm:num_requests_running\{model_name="stories"\} 0/)
  const other = await fetch(`${metricsUrl}/api/v1/models`)
  t.equal(other.status, 404, 'nothing but /metrics there')
  t.equal(((await other.json()) as { error: { code: string } }).error.code, 'not_found')
  await app.close()
  await t.rejects(fetch(`${metricsUrl}/metrics`), 'closed with the app')
})

t.test('without METRICS_PORT, /metrics is on the API port', async t => {
  const { url } = await serverWith(t, {})
  const res = await fetch(`${url}/metrics`)
  t.equal(res.status, 200)
  t.match(await res.text(), /vllm:num_requests_running/)
})
