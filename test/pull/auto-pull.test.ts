// `chatd serve` on a fresh machine: a configured local model whose files are
// missing is downloaded by the server itself. The server answers at once;
// /readyz and the model say 503 with the download's progress until the files
// are complete, then the model loads and answers. An unreachable hub leaves the
// model unavailable with an error that names the hub and the pull command.

import { join } from 'node:path'
import { Writable } from 'node:stream'
import t, { type Test } from 'tap'
import { loadConfig } from '../../src/config.ts'
import { startServer } from '../../src/server.ts'
import { storiesModelDir } from '../helpers/models.ts'
import { testDevice } from '../helpers/test-device.ts'
import { REFUSED_URL } from '../helpers/refused.ts'
import { repoFromDir, startHub } from './hub-server.ts'

const REPO = 'test-org/stories260k-ONNX'
const KEY = `sk-chatd-${'autoPull'.repeat(4)}`
const source = storiesModelDir('int4')

/** A server on a temp database whose one model (id "stories") must come from `endpoint`. */
async function serve (t: Test, endpoint: string, env: Record<string, string> = {}) {
  const dir = t.testdir({
    'models.json': JSON.stringify({ models: [{ id: 'stories', backend: 'onnx', path: 'stories', dtype: 'q4', device: testDevice(), hubRepo: REPO }] }),
  })
  const config = loadConfig({
    PORT: '0',
    DATABASE_URL: `sqlite://${join(dir, 'chatd.db')}`,
    MODELS_FILE: join(dir, 'models.json'),
    CHATD_ADMIN_KEY: KEY,
    HF_ENDPOINT: endpoint,
    ...env,
  })
  const logs: Array<Record<string, unknown>> = []
  const stream = new Writable({
    write (chunk, _enc, done) {
      for (const line of String(chunk).split('\n').filter(Boolean)) logs.push(JSON.parse(line))
      done()
    },
  })
  const app = await startServer(config, { print: () => {}, logger: { level: 'info', stream } })
  t.teardown(() => app.close())
  const chat = () => app.inject({ method: 'POST', url: '/api/v1/chat/completions', headers: { authorization: `Bearer ${KEY}` }, payload: { model: 'stories', messages: [{ role: 'user', content: 'Once upon a time' }], max_tokens: 8, temperature: 0 } })
  return { app, dir, logs, chat }
}

async function until<T> (what: string, probe: () => Promise<T | undefined>, ms = 30000): Promise<T> {
  const deadline = Date.now() + ms
  for (;;) {
    const value = await probe()
    if (value !== undefined) return value
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`)
    await new Promise(resolve => setTimeout(resolve, 20))
  }
}

t.test('missing files are fetched at start; 503 model_unavailable with progress until then, then the model answers', async t => {
  const repo = repoFromDir(source)
  const data = 'onnx/model_q4.onnx_data'
  const dataSize = repo.files.get(data)!.length
  let release!: () => void
  repo.holdOnce = new Map([[data, { bytes: Math.floor(dataSize / 2), release: new Promise<void>(resolve => { release = resolve }) }]])
  const hub = await startHub({ [REPO]: repo })
  t.teardown(hub.close)
  const { app, logs, chat } = await serve(t, hub.url)

  t.equal((await app.inject({ url: '/healthz' })).statusCode, 200, 'the server answers at once')

  // The hub holds the data file half-sent: the download is in progress.
  const during = await until('the download to reach the data file', async () => {
    const res = await app.inject({ url: '/readyz' })
    const body = res.json()
    return body.downloads?.stories?.file === data && body.downloads.stories.downloadedBytes > 0 ? res : undefined
  })
  t.equal(during.statusCode, 503)
  const body = during.json()
  t.equal(body.status, 'loading')
  t.equal(body.models.stories, 'unavailable')
  t.match(body.downloads.stories, { state: 'downloading', file: data, totalBytes: [...repo.files.entries()].filter(([p]) => !p.startsWith('onnx/') || p.startsWith('onnx/model_q4.onnx')).reduce((s, [, c]) => s + c.length, 0) })
  t.ok(body.downloads.stories.percent > 0 && body.downloads.stories.percent < 100, `progress ${body.downloads.stories.percent}%`)

  const refused = await chat()
  t.equal(refused.statusCode, 503)
  t.equal(refused.headers['retry-after'], '30', 'on its way: come back later')
  t.match(refused.json(), { error: { type: 'server_error', code: 'model_unavailable', param: 'model' } })
  t.match(refused.json().error.message, new RegExp(`^The model 'stories' is unavailable: its files are being downloaded from ${hub.url}/${REPO}: \\d+\\.\\d% \\([\\d.]+ KiB of [\\d.]+ KiB`))
  const listed = await app.inject({ url: '/api/v1/models/stories', headers: { authorization: `Bearer ${KEY}` } })
  t.match(listed.json(), { status: 'unavailable', status_reason: /being downloaded/ })

  release()
  await until('readiness', async () => (await app.inject({ url: '/readyz' })).statusCode === 200 ? true : undefined)
  const ready = (await app.inject({ url: '/readyz' })).json()
  t.same(ready, { status: 'ready', models: { stories: 'ready' } }, 'no downloads listed once complete')
  const answered = await chat()
  t.equal(answered.statusCode, 200, answered.body)
  t.equal(answered.json().usage.completion_tokens > 0, true)

  const messages = logs.map(l => l.msg)
  t.ok(messages.includes('model files missing: downloading them (CHATD_AUTO_PULL=0 turns this off)'))
  t.ok(messages.some(m => typeof m === 'string' && /^pull: complete: 7 files, [\d.]+ KiB, verified$/.test(m)))
  t.match(logs.find(l => l.msg === 'model ready'), { model: 'stories', device: testDevice() }, 'the execution provider is logged')
})

t.test('an unreachable hub: the model is unavailable, and the error names the hub and the exact pull command', async t => {
  const { app, logs, chat } = await serve(t, REFUSED_URL)
  await until('the download to fail', async () => (await app.inject({ url: '/readyz' })).json().downloads?.stories?.state === 'failed' ? true : undefined)
  const readyz = await app.inject({ url: '/readyz' })
  t.same(readyz.json().downloads.stories, { state: 'failed', error: 'its files could not be downloaded; the server log says why and the command to retry' }, '/readyz needs no key: it says that the download failed, not where from or what to run')
  const res = await chat()
  // A download that failed is not retried by the server: the client is told to stop (400), not to come back.
  t.equal(res.statusCode, 400)
  t.equal(res.headers['retry-after'], undefined)
  t.match(res.json().error, {
    code: 'model_out_of_service',
    message: new RegExp(`^The model 'stories' is out of service: its files could not be downloaded: could not reach the Hugging Face Hub at ${REFUSED_URL}: .*\\(run: npx chatd pull stories\\)\\. It stays so until the server's operator acts`),
  })
  t.match(logs.find(l => l.msg === 'model download failed; to retry by hand run: npx chatd pull stories'), { level: 50, model: 'stories' })
  // Each message says it once: no log line's message, error or err.message repeats the hub's
  // message or the network error (a stack may: it is a stack).
  t.ok(logs.some(l => l.msg === 'model failed to load'))
  const once = (text: unknown, what: string, where: string) => {
    if (typeof text === 'string') t.ok(text.split(what).length <= 2, `${where} says "${what}" at most once: ${text}`)
  }
  for (const line of logs) {
    for (const [where, text] of [['msg', line.msg], ['error', line.error], ['err.message', (line.err as { message?: string } | undefined)?.message]] as const) {
      once(text, 'could not reach the Hugging Face Hub', `${line.msg}: ${where}`)
      once(text, 'ECONNREFUSED', `${line.msg}: ${where}`)
    }
  }
})

t.test('CHATD_AUTO_PULL=0: nothing is fetched, the model says how to pull it', async t => {
  const hub = await startHub({ [REPO]: repoFromDir(source) })
  t.teardown(hub.close)
  const { app, dir, chat } = await serve(t, hub.url, { CHATD_AUTO_PULL: '0' })
  t.match((await app.inject({ url: '/readyz' })).json(), { status: 'unavailable' }, 'its only model cannot answer: not ready (503)')
  t.match((await chat()).json().error, { code: 'model_out_of_service', message: `The model 'stories' is out of service: model files not found at ${join(dir, 'stories')} (run: npx chatd pull stories). It stays so` })
  t.equal(hub.requests.length, 0, 'the hub was never asked')
})

t.test('a server stopped mid-download keeps the partial file, and the next start resumes it', async t => {
  const repo = repoFromDir(source)
  const data = 'onnx/model_q4.onnx_data'
  const held = Math.floor(repo.files.get(data)!.length / 2)
  repo.holdOnce = new Map([[data, { bytes: held, release: new Promise<void>(() => {}) }]])
  const hub = await startHub({ [REPO]: repo })
  t.teardown(hub.close)
  const first = await serve(t, hub.url)
  await until('half the data file', async () => (await first.app.inject({ url: '/readyz' })).json().downloads?.stories?.file === data ? true : undefined)
  await until('the held bytes on disk', async () => (await first.app.inject({ url: '/readyz' })).json().downloads.stories.downloadedBytes >= held ? true : undefined)
  await first.app.close()
  t.ok(first.logs.some(l => l.msg === 'model download stopped; it resumes at the next start'))

  // Same directory, new server: it asks only for the rest.
  const second = await startServer(loadConfig({
    PORT: '0',
    LOG_LEVEL: 'silent',
    DATABASE_URL: `sqlite://${join(first.dir, 'chatd.db')}`,
    MODELS_FILE: join(first.dir, 'models.json'),
    HF_ENDPOINT: hub.url,
  }), { print: () => {}, logger: false })
  t.teardown(() => second.close())
  await until('readiness after resuming', async () => (await second.inject({ url: '/readyz' })).statusCode === 200 ? true : undefined)
  t.equal(hub.downloads().filter(r => r.url.endsWith(data)).at(-1)?.range, `bytes=${held}-`)
  t.same((await second.inject({ url: '/readyz' })).json().models, { stories: 'ready' })
})
