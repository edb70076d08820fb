// npm run soak: memory under agent traffic. Starts `chatd serve` as a child
// process (so its resident set is the server's alone) on stories260k, over a
// temp SQLite file, with accounts on a tier that counts but never refuses,
// then sends tens of thousands of requests that each carry a schema or tools
// no earlier request carried, over all three doors: chat completions with a
// json_schema response_format or a forced tool call, Responses with function
// tools (forced and auto), Messages with tools (forced and auto). It samples
// the child's RSS as it goes and reports the curve, the growth in all and the
// growth over the second half. Exits 1 when a bound given on the command line
// is broken, or when a request got a 5xx or no answer.
//
//   npm run soak -- [--requests 22000] [--accounts 1] [--concurrency 4] [--samples 20]
//                   [--max-growth-mb 768] [--max-second-half-pct 5] [--json FILE] [--env NAME=VALUE ...]
import { spawn } from 'node:child_process'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { Accounts } from '../src/accounts/accounts.ts'
import { loadConfig } from '../src/config.ts'
import { openMigratedDatabase } from '../src/store/database.ts'
import { freePort } from '../test/helpers/chatd-process.ts'
import { convertCheckpoint } from '../src/convert/index.ts'
import { REPO_ROOT, STORIES_SOURCE } from '../test/helpers/models.ts'
import { soakBody, type SoakDoor } from './soak/bodies.ts'
import { scriptArgs } from './script-args.ts'

const { values } = scriptArgs(import.meta.url, {
  options: {
    requests: { type: 'string', default: '22000' },
    accounts: { type: 'string', default: '1' },
    concurrency: { type: 'string', default: '4' },
    samples: { type: 'string', default: '20' },
    'max-growth-mb': { type: 'string' },
    'max-second-half-pct': { type: 'string' },
    json: { type: 'string' },
    env: { type: 'string', multiple: true, default: [] },
  },
})
const plan = {
  requests: Number(values.requests),
  accounts: Number(values.accounts),
  concurrency: Number(values.concurrency),
  samples: Number(values.samples),
}
const MODEL = 'stories260k'
/** Counted, never reached: the run measures memory, not the tier. */
const COUNTED_NOT_LIMITING = { requests_per_minute: 1e9, tokens_per_minute: 1e12, calls_per_month: 1e12, max_tokens_per_request: 1e6, models: ['*'] }

const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'chatd-soak-'))

/**
 * stories260k with a 4,096-token window instead of 512, so requests with a few tools fit and
 * run (what it writes past 512 positions is nonsense; the run measures memory, not text).
 */
function wideStories (): string {
  const source = path.join(dir, 'stories260k-source')
  fs.cpSync(STORIES_SOURCE, source, { recursive: true })
  for (const [file, field] of [['config.json', 'max_position_embeddings'], ['tokenizer_config.json', 'model_max_length']]) {
    const configFile = path.join(source, file)
    fs.writeFileSync(configFile, JSON.stringify({ ...JSON.parse(fs.readFileSync(configFile, 'utf8')), [field]: 4096 }))
  }
  const out = path.join(dir, 'stories260k-wide')
  convertCheckpoint({ from: source, out, weights: 'fp32' })
  return out
}
const modelsFile = path.join(dir, 'models.json')
const tiersFile = path.join(dir, 'tiers.json')
fs.writeFileSync(modelsFile, JSON.stringify({ models: [{ id: MODEL, backend: 'onnx', path: wideStories(), dtype: 'fp32', device: 'cpu' }] }))
fs.writeFileSync(tiersFile, JSON.stringify({ default: 'soak', tiers: { soak: COUNTED_NOT_LIMITING } }))
const env: Record<string, string> = {
  HOST: '127.0.0.1',
  LOG_LEVEL: 'error',
  DATABASE_URL: `sqlite://${path.join(dir, 'chatd.db')}`,
  MODELS_FILE: modelsFile,
  TIERS_FILE: tiersFile,
  CHATD_AUTO_PULL: '0',
  MAX_CONNECTIONS_PER_ADDRESS: '0',
  // Some bodies still overflow the 512-token window (a 400): refusals must not lock the key out.
  REFUSED_PER_KEY_PER_MINUTE: '0',
  REFUSED_PER_ADDRESS_PER_MINUTE: '0',
  ...Object.fromEntries(values.env.map(pair => [pair.slice(0, pair.indexOf('=')), pair.slice(pair.indexOf('=') + 1)])),
}

// The accounts exist before the server starts, as ones made with `chatd accounts create` would.
const db = await openMigratedDatabase(loadConfig(env).database)
const accounts = new Accounts(db)
const keys: string[] = []
for (let i = 0; i < plan.accounts; i++) {
  const account = await accounts.create({ email: `soak${i}@example.com`, tier: 'soak' })
  keys.push((await accounts.createKey(account.id, { name: 'soak' })).key)
}
await db.destroy()

const port = await freePort()
const base = `http://127.0.0.1:${port}`
const child = spawn(process.execPath, [path.join(REPO_ROOT, 'src/cli.ts'), 'serve'], {
  cwd: REPO_ROOT, env: { ...process.env, ...env, PORT: String(port) }, stdio: ['ignore', 'inherit', 'inherit'],
})
const exited = new Promise<void>(resolve => child.once('exit', () => resolve()))

/**
 * The child's memory from /proc, after `requests` requests: its resident set (what the kernel
 * would count against it), the anonymous part of it (heaps, WebAssembly, onnxruntime's arena,
 * against mapped files), and the threads alive (workers that come and go).
 */
function sample (requests: number, seconds: number): { requests: number; rssMb: number; seconds: number; anonMb: number; threads: number } {
  const status = fs.readFileSync(`/proc/${child.pid}/status`, 'utf8')
  const rollup = fs.readFileSync(`/proc/${child.pid}/smaps_rollup`, 'utf8')
  const mib = (kb: string | undefined): number => Math.round(Number(kb ?? 0) / 1024)
  return {
    requests,
    rssMb: mib(/VmRSS:\s+(\d+)/.exec(status)?.[1]),
    seconds,
    anonMb: mib(/^Anonymous:\s+(\d+)/m.exec(rollup)?.[1]),
    threads: Number(/Threads:\s+(\d+)/.exec(status)?.[1] ?? 0),
  }
}

async function ready (): Promise<void> {
  const deadline = Date.now() + 60_000
  while (Date.now() < deadline) {
    const ok = await fetch(`${base}/readyz`).then(r => r.ok, () => false)
    if (ok) return
    await new Promise(resolve => setTimeout(resolve, 100))
  }
  throw new Error('chatd did not become ready within 60 s')
}

const DOOR_PATH: Record<SoakDoor, string> = { chat: '/api/v1/chat/completions', responses: '/api/v1/responses', messages: '/api/v1/messages' }
const statuses = new Map<string, number>()
const failures: string[] = []
let sent = 0
let done = 0

async function one (i: number): Promise<void> {
  const { door, body } = soakBody(i, MODEL)
  const key = keys[Math.abs(i) % keys.length]
  let status: string
  try {
    const res = await fetch(base + DOOR_PATH[door], {
      method: 'POST',
      headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
      body: JSON.stringify(body),
    })
    const text = await res.text()
    status = `${door} ${res.status}`
    if (res.status >= 500 && failures.length < 20) failures.push(`${status}: ${text.slice(0, 300)}`)
    if (process.env.SOAK_DEBUG && res.status >= 400) console.error(status, text.slice(0, 400))
  } catch (err) {
    status = `${door} no answer`
    if (failures.length < 20) failures.push(`${status}: ${(err as Error).message}`)
  }
  statuses.set(status, (statuses.get(status) ?? 0) + 1)
  done++
}

try {
  await ready()
  // A warm-up of each door, so the start is measured after the first grammar worker is up.
  for (let i = 0; i < 12; i++) await one(-1 - i)
  const curve: Array<ReturnType<typeof sample>> = []
  const started = performance.now()
  const every = Math.max(1, Math.floor(plan.requests / plan.samples))
  curve.push(sample(0, 0))
  done = 0
  const line = (point: typeof curve[number]): void => console.error(`${String(point.requests).padStart(7)} requests  ${String(point.rssMb).padStart(6)} MiB (${point.anonMb} anonymous)  ${String(point.threads).padStart(3)} threads  ${point.seconds.toFixed(0).padStart(5)} s`)
  line(curve[0])
  let nextSample = every
  await Promise.all(Array.from({ length: plan.concurrency }, async () => {
    while (sent < plan.requests) {
      await one(sent++)
      if (done >= nextSample) {
        nextSample += every
        const point = sample(done, (performance.now() - started) / 1000)
        curve.push(point)
        line(point)
      }
    }
  }))
  const last = curve.at(-1)!
  if (last.requests !== done) curve.push(sample(done, (performance.now() - started) / 1000))
  const start = curve[0].rssMb
  const end = curve.at(-1)!.rssMb
  const half = curve.reduce((best, p) => Math.abs(p.requests - done / 2) < Math.abs(best.requests - done / 2) ? p : best)
  const report = {
    machine: `${os.cpus()[0]?.model ?? 'unknown'}, ${os.cpus().length} cores`,
    plan,
    settings: values.env,
    statuses: Object.fromEntries([...statuses].sort()),
    failures,
    rss_start_mb: start,
    rss_end_mb: end,
    rss_peak_mb: Math.max(...curve.map(p => p.rssMb)),
    growth_mb: end - start,
    second_half_growth_pct: Math.round((end - half.rssMb) / half.rssMb * 1000) / 10,
    curve,
  }
  console.log(JSON.stringify({ ...report, curve: undefined }, null, 2))
  if (values.json) fs.writeFileSync(values.json, JSON.stringify(report, null, 2))
  const broken: string[] = []
  if (failures.length > 0) broken.push(`${failures.length} requests got a 5xx or no answer`)
  if (values['max-growth-mb'] && report.growth_mb > Number(values['max-growth-mb'])) broken.push(`RSS grew ${report.growth_mb} MiB (bound ${values['max-growth-mb']})`)
  if (values['max-second-half-pct'] && report.second_half_growth_pct > Number(values['max-second-half-pct'])) broken.push(`RSS grew ${report.second_half_growth_pct}% over the second half (bound ${values['max-second-half-pct']}%)`)
  for (const reason of broken) console.error(`broken: ${reason}`)
  process.exitCode = broken.length > 0 ? 1 : 0
} finally {
  child.kill('SIGTERM')
  await exited
  fs.rmSync(dir, { recursive: true, force: true })
}
