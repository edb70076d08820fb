// The shipped Grafana dashboard (deploy/grafana/dashboards/chatd.json) against
// a running chatd: a local model (stories260k) and an upstream one, requests
// through both, refusals and errors. Every metric a panel queries must be in
// /metrics; then a real Prometheus (Debian's `prometheus` package) scrapes that
// chatd, behind METRICS_TOKEN as deploy/prometheus/prometheus.yml describes,
// and every panel's query must return data. Without Prometheus the second
// test skips, saying how to install it; with CHATD_REQUIRE_SERVICES=1 (CI) it
// fails instead. promtool checks the shipped Prometheus configuration.

import { spawn, spawnSync } from 'node:child_process'
import { once } from 'node:events'
import { existsSync, readFileSync, writeFileSync } from 'node:fs'
import type { AddressInfo } from 'node:net'
import { join } from 'node:path'
import t from 'tap'
import { loadConfig } from '../../src/config.ts'
import { startServer } from '../../src/server.ts'
import { freePort } from '../helpers/chatd-process.ts'
import { fakeUpstream } from '../helpers/fake-upstream.ts'
import { metricSamples } from '../helpers/load/metrics-scrape.ts'
import { REPO_ROOT, storiesModelEntry } from '../helpers/models.ts'

const KEY = `sk-chatd-${'observability'.repeat(2)}abcdef`
const TOKEN = 'scrape-token-0123456789abcdef01234567'
const REQUIRED = process.env.CHATD_REQUIRE_SERVICES === '1'
const PROMETHEUS = ['/usr/bin/prometheus', '/usr/local/bin/prometheus', '/bin/prometheus'].find(path => existsSync(path))
const PROMTOOL = ['/usr/bin/promtool', '/usr/local/bin/promtool', '/bin/promtool'].find(path => existsSync(path))
const MISSING = 'Prometheus is not installed (apt-get install prometheus; .ci/run does)'

interface Panel { title: string; type: string; targets?: Array<{ expr: string }>; datasource?: { uid: string } }
const dashboard = JSON.parse(readFileSync(join(REPO_ROOT, 'deploy/grafana/dashboards/chatd.json'), 'utf8')) as { panels: Panel[]; templating: { list: Array<{ name: string; definition?: string }> } }
const queries = dashboard.panels.flatMap(p => (p.targets ?? []).map(target => ({ panel: p.title, expr: target.expr })))

/** A panel's query as Grafana would send it with the default variables (the vllm: prefix, every model). */
function concrete (expr: string, range = '1m'): string {
  return expr.replaceAll('${prefix}', 'vllm:').replaceAll('$model_name', '.*').replaceAll('$__rate_interval', range).replaceAll('$__range', '5m')
}

/** The metric names a query selects (every selector in the dashboard is written `name{...}`). */
function metricNames (expr: string): string[] {
  return [...concrete(expr).matchAll(/([a-zA-Z_:][a-zA-Z0-9_:]*)\{/g)].map(m => m[1])
}

// One chatd for the file: a local model and an upstream one, per-account series on, /metrics behind a token.
const upstream = await fakeUpstream(t, { delayMs: 5 })
const dir = t.testdir({
  'models.json': JSON.stringify({
    models: [
      storiesModelEntry('stories', { threads: 1 }),
      { id: 'relay', backend: 'openai', baseUrl: `${upstream.url}/v1`, upstreamModel: 'm' },
    ],
  }),
})
const app = await startServer(loadConfig({
  PORT: '0',
  LOG_LEVEL: 'silent',
  DATABASE_URL: `sqlite://${join(dir, 'chatd.db')}`,
  MODELS_FILE: join(dir, 'models.json'),
  CHATD_ADMIN_KEY: KEY,
  CHATD_AUTO_PULL: '0',
  METRICS_ACCOUNTS_TOP: '5',
  METRICS_TOKEN: TOKEN,
}), { print: () => {}, logger: false })
t.teardown(() => app.close())
const url = `http://127.0.0.1:${(app.server.address() as AddressInfo).port}`
for (const deadline = Date.now() + 60_000; (await fetch(`${url}/readyz`)).status !== 200;) {
  if (Date.now() > deadline) throw new Error('the models did not become ready')
  await new Promise(resolve => setTimeout(resolve, 20))
}

const scrape = async (): Promise<string> => (await fetch(`${url}/metrics`, { headers: { authorization: `Bearer ${TOKEN}` } })).text()

/** Requests that move every panel: both models, a repeated prompt (prefix cache hits), a refusal, an error. */
async function traffic (): Promise<void> {
  const chat = (body: Record<string, unknown>) => fetch(`${url}/api/v1/chat/completions`, {
    method: 'POST',
    headers: { authorization: `Bearer ${KEY}`, 'content-type': 'application/json' },
    body: JSON.stringify({ messages: [{ role: 'user', content: 'Once upon a time there was a little dog named Max who lived in a small house.' }], temperature: 0, max_tokens: 12, ...body }),
  })
  for (const body of [{ model: 'stories' }, { model: 'stories' }, { model: 'relay' }, { model: 'relay', stream: true }]) {
    const res = await chat(body)
    if (res.status !== 200) throw new Error(`${JSON.stringify(body)} answered ${res.status}: ${await res.text()}`)
    await res.text()
  }
  const refused = await chat({ model: 'stories', n: 3 })
  if (refused.status !== 400) throw new Error(`the refusal answered ${refused.status}`)
  await refused.text()
}

t.test('the dashboard: every panel has a query on the chosen data source, and the vLLM families go through ${prefix}', async t => {
  t.ok(queries.length >= 20, `${queries.length} queries`)
  for (const panel of dashboard.panels.filter(p => p.type !== 'row')) {
    t.ok(panel.targets && panel.targets.length > 0, `${panel.title} has queries`)
    t.equal(panel.datasource?.uid, '${datasource}', `${panel.title} reads the chosen data source`)
  }
  t.notMatch(JSON.stringify(dashboard.panels), /vllm:/, 'no panel names vllm: itself (METRICS_FAMILY_PREFIX=chatd: works too)')
  t.same(dashboard.templating.list.map(v => v.name), ['datasource', 'prefix', 'model_name'])
})

t.test('every metric a panel queries is in /metrics after requests', async t => {
  await traffic()
  const text = await scrape()
  const exposed = new Set(text.split('\n').filter(line => line !== '' && !line.startsWith('#')).map(line => /^[^{\s]+/.exec(line)![0]))
  const variable = dashboard.templating.list.find(v => v.name === 'model_name')!
  for (const { panel, expr } of [...queries, { panel: 'the model_name variable', expr: variable.definition!.replace('label_values(${prefix}num_requests_running, model_name)', '${prefix}num_requests_running{}') }]) {
    for (const name of metricNames(expr)) t.ok(exposed.has(name), `${panel}: ${name}`)
  }
  // Both models are there, each under model_name.
  t.same(new Set(metricSamples(text, 'vllm:request_success_total').map(s => s.labels.model_name)), new Set(['stories', 'relay']))
})

t.test('promtool accepts the shipped Prometheus configuration', { skip: !PROMTOOL && !REQUIRED && MISSING }, async t => {
  if (!PROMTOOL) return t.fail(`${MISSING}, and CHATD_REQUIRE_SERVICES=1 says it must be`)
  const res = spawnSync(PROMTOOL, ['check', 'config', join(REPO_ROOT, 'deploy/prometheus/prometheus.yml')], { encoding: 'utf8' })
  t.equal(res.status, 0, res.stdout + res.stderr)
})

t.test('a real Prometheus scrapes chatd, and every panel\'s query returns data', { skip: !PROMETHEUS && !REQUIRED && MISSING }, async t => {
  if (!PROMETHEUS) return t.fail(`${MISSING}, and CHATD_REQUIRE_SERVICES=1 says it must be`)
  const port = await freePort()
  const promDir = t.testdir()
  const target = new URL(url).host
  // As deploy/prometheus/prometheus.yml, with this chatd as the target, its token, and a 1 s interval.
  writeFileSync(join(promDir, 'prometheus.yml'), [
    'global:',
    '  scrape_interval: 1s',
    '  evaluation_interval: 1s',
    'scrape_configs:',
    '  - job_name: chatd',
    '    metrics_path: /metrics',
    '    authorization:',
    '      type: Bearer',
    `      credentials: "${TOKEN}"`,
    '    static_configs:',
    `      - targets: ["${target}"]`,
    '',
  ].join('\n'))
  const prometheus = spawn(PROMETHEUS, [
    `--config.file=${join(promDir, 'prometheus.yml')}`,
    `--storage.tsdb.path=${join(promDir, 'data')}`,
    `--web.listen-address=127.0.0.1:${port}`,
  ], { stdio: ['ignore', 'pipe', 'pipe'] })
  let output = ''
  prometheus.stdout.on('data', chunk => { output += chunk })
  prometheus.stderr.on('data', chunk => { output += chunk })
  const exited = once(prometheus, 'exit')
  t.teardown(async () => {
    if (prometheus.exitCode === null) {
      prometheus.kill('SIGTERM')
      await exited
    }
  })
  const api = `http://127.0.0.1:${port}`
  const query = async (promql: string): Promise<Array<{ metric: Record<string, string>; value: [number, string] }>> => {
    const res = await fetch(`${api}/api/v1/query?query=${encodeURIComponent(promql)}`)
    const body = await res.json() as { status: string; error?: string; data: { result: Array<{ metric: Record<string, string>; value: [number, string] }> } }
    if (body.status !== 'success') throw new Error(`${promql}: ${body.error}`)
    return body.data.result
  }
  const until = async (what: string, test: () => Promise<boolean>): Promise<void> => {
    const deadline = Date.now() + 60_000
    while (!(await test().catch(() => false))) {
      if (prometheus.exitCode !== null) throw new Error(`prometheus exited: ${output.slice(-2000)}`)
      if (Date.now() > deadline) throw new Error(`${what} did not happen within 60 s; prometheus said: ${output.slice(-2000)}`)
      await new Promise(resolve => setTimeout(resolve, 100))
    }
  }
  await until('Prometheus scraping chatd', async () => (await query('up{job="chatd"}'))[0]?.value[1] === '1')
  // Traffic between scrapes, so that every rate over the window has something to count.
  await traffic()
  const total = metricSamples(await scrape(), 'vllm:request_success_total').reduce((n, s) => n + s.value, 0)
  await until('a scrape after the traffic', async () => Number((await query('sum(vllm:request_success_total)'))[0]?.value[1]) === total)
  const scrapes = Number((await query('count_over_time(up{job="chatd"}[1m])'))[0].value[1])
  await until('one more scrape', async () => Number((await query('count_over_time(up{job="chatd"}[1m])'))[0].value[1]) > scrapes)

  for (const { panel, expr } of queries) {
    const result = await query(concrete(expr))
    t.ok(result.length > 0, `${panel}: ${concrete(expr).slice(0, 80)} returns data`)
    t.ok(result.some(r => Number.isFinite(Number(r.value[1]))), `${panel}: with a number`)
  }
  const models = await fetch(`${api}/api/v1/label/model_name/values?match[]=${encodeURIComponent('vllm:num_requests_running')}`)
  t.same(((await models.json()) as { data: string[] }).data.sort(), ['relay', 'stories'], 'the model variable lists both models')
})
