// The real server under benchmark: `chatd serve` in a child process on one
// model directory, an account on a tier that never refuses, and an openai
// client for it.
import { spawn } from 'node:child_process'
import fs from 'node:fs'
import path from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'
import OpenAI from 'openai'
import { freePort } from '../../test/helpers/chatd-process.ts'

export const BENCH_MODEL_ID = 'bench-model'
const KEY = 'sk-chatd-benchBENCHbenchBENCHbenchBENCH00'

export interface ChatdServer {
  client: OpenAI
  /** The server process's peak resident memory so far, in MB. */
  peakRssMb (): number
  /** The sum of a counter's or gauge's series in the server's /metrics whose labels include `labels` (e.g. `kind="decode"`). */
  metric (name: string, labels?: string): Promise<number>
  stop (): Promise<void>
}

export async function startChatdServer (opts: {
  root: string
  out: string
  modelDir: string
  dtype: string
  /** Settings for the server (ONNX_DEVICE, MAX_BATCH, PREFIX_CACHE, ...). */
  env: Record<string, string>
  /** Distinguishes the files of servers running side by side. */
  name: string
  /** More fields of the model's models.json entry (e.g. `reasoning`). */
  model?: Record<string, unknown>
}): Promise<ChatdServer> {
  const port = await freePort()
  fs.mkdirSync(opts.out, { recursive: true })
  const dbPath = path.join(opts.out, `bench-${opts.name}-${process.pid}.db`)
  const modelsFile = path.join(opts.out, `bench-models-${opts.name}.json`)
  const tiersFile = path.join(opts.out, 'bench-tiers.json')
  fs.writeFileSync(modelsFile, JSON.stringify({ models: [{ id: BENCH_MODEL_ID, backend: 'onnx', path: opts.modelDir, dtype: opts.dtype, ...opts.model }] }))
  // The benchmark measures the engine, not the limits: its account gets a tier that never refuses.
  const unlimited = { requests_per_minute: 1e9, tokens_per_minute: 1e12, calls_per_month: 1e12, max_tokens_per_request: 1e6, models: ['*'] }
  fs.writeFileSync(tiersFile, JSON.stringify({ tiers: { free: unlimited, pro: unlimited } }))
  const server = spawn(process.execPath, [path.join(opts.root, 'src/cli.ts'), 'serve'], {
    env: {
      ...process.env,
      PORT: String(port),
      HOST: '127.0.0.1',
      DATABASE_URL: `sqlite://${dbPath}`,
      MODELS_FILE: modelsFile,
      TIERS_FILE: tiersFile,
      CHATD_ADMIN_KEY: KEY,
      CHATD_AUTO_PULL: '0',
      LOG_LEVEL: 'warn',
      // One client address sends every request: no per-address caps or refusal meters.
      MAX_CONNECTIONS_PER_ADDRESS: '0',
      REFUSED_PER_ADDRESS_PER_MINUTE: '0',
      ...opts.env,
    },
    stdio: ['ignore', 'ignore', 'inherit'],
  })
  const cleanup = (): void => {
    server.kill('SIGTERM')
    for (const suffix of ['', '-wal', '-shm']) fs.rmSync(`${dbPath}${suffix}`, { force: true })
  }
  process.on('exit', cleanup)
  const base = `http://127.0.0.1:${port}`
  for (let ready = false; !ready; await sleep(200)) {
    if (server.exitCode !== null) throw new Error(`the ${opts.name} server exited during start-up`)
    ready = await fetch(`${base}/readyz`).then(r => r.ok, () => false)
  }
  return {
    // One retry: a connection error (a keep-alive connection closed while it idled) is retried at
    // once; a request that got an answer is never repeated.
    client: new OpenAI({ apiKey: KEY, baseURL: `${base}/api/v1`, maxRetries: 1, timeout: 900_000 }),
    peakRssMb () {
      const status = fs.readFileSync(`/proc/${server.pid}/status`, 'utf8')
      return Math.round(Number(/VmHWM:\s+(\d+)/.exec(status)?.[1] ?? 0) / 1024)
    },
    async metric (name, labels = '') {
      const text = await fetch(`${base}/metrics`).then(r => r.text())
      let sum = 0
      for (const line of text.split('\n')) {
        const m = /^([a-zA-Z_:][\w:]*)(\{[^}]*\})? (\S+)$/.exec(line)
        if (m && m[1] === name && (m[2] ?? '').includes(labels)) sum += Number(m[3])
      }
      return sum
    },
    async stop () {
      cleanup()
      process.off('exit', cleanup)
      if (server.exitCode === null) await new Promise(resolve => server.once('exit', resolve))
    },
  }
}
