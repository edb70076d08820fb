// chatd pull's downloader against a loopback hub serving the converted
// stories260k: a fresh download, resuming after a cut connection, a corrupt
// file caught by its hash and removed, a gated repository, an unreachable hub.

import { existsSync, readFileSync, statSync } from 'node:fs'
import { join } from 'node:path'
import t, { type Test } from 'tap'
import { readModelDir } from '../../src/engine/onnx/model-dir.ts'
import { pullModel, type PullEvent } from '../../src/pull/pull.ts'
import { storiesModelDir } from '../helpers/models.ts'
import { REFUSED_URL } from '../helpers/refused.ts'
import { partialReaches, repoFromDir, startHub, type HubRepo } from './hub-server.ts'

const REPO = 'test-org/stories260k-ONNX'
const TOKEN = 'hf_loopbacktesttoken'
const source = storiesModelDir('int4')

/** The converted model plus an fp16 graph of another dtype, which a q4 pull must leave alone. */
function storiesRepo (): HubRepo {
  return repoFromDir(source, { 'onnx/model_fp16.onnx': 'not for this dtype', 'README.md': '# stories260k' })
}

async function hubWith (t: Test, repo: HubRepo) {
  const hub = await startHub({ [REPO]: repo })
  t.teardown(hub.close)
  return hub
}

const same = (dir: string, path: string): boolean => readFileSync(join(dir, path)).equals(readFileSync(join(source, path)))

t.test('a fresh pull fetches exactly the files the dtype needs, verified, and a second pull fetches nothing', async t => {
  const hub = await hubWith(t, storiesRepo())
  const dir = join(t.testdir(), 'stories')
  const events: PullEvent[] = []
  const result = await pullModel({ hub: { endpoint: hub.url, repo: REPO, revision: 'main' }, dir, dtype: 'q4', onEvent: e => events.push(e) })

  const expected = ['config.json', 'tokenizer.json', 'tokenizer_config.json', 'generation_config.json', 'special_tokens_map.json', 'onnx/model_q4.onnx', 'onnx/model_q4.onnx_data']
  t.same(result.files.map(f => f.path), expected)
  for (const path of expected) t.ok(same(dir, path), `${path} is byte-identical`)
  t.notOk(existsSync(join(dir, 'onnx/model_fp16.onnx')), 'another dtype\'s graph is not fetched')
  t.notOk(existsSync(join(dir, 'README.md')))
  t.notOk(existsSync(join(dir, 'onnx/model_q4.onnx_data.partial')), 'no partial file left')
  t.notOk(existsSync(join(dir, '.chatd-pull.lock')), 'the lock is released')
  t.equal(readModelDir(dir, 'q4').numLayers, readModelDir(source, 'q4').numLayers, 'the engine can read the pulled directory')
  t.equal(events[0]?.type, 'plan')
  t.equal(events.at(-1)?.type, 'done')
  const progress = events.flatMap(e => e.type === 'file-progress' && e.file.path === 'onnx/model_q4.onnx_data' ? [e.bytes] : [])
  t.equal(progress.at(-1), statSync(join(source, 'onnx/model_q4.onnx_data')).size, 'progress reaches the file size')

  const before = hub.downloads().length
  const again = await pullModel({ hub: { endpoint: hub.url, repo: REPO, revision: 'main' }, dir, dtype: 'q4' })
  t.equal(again.skipped, expected.length, 'every file is already complete')
  t.equal(hub.downloads().length, before, 'nothing downloaded the second time')
})

t.test('an interrupted download keeps its bytes as .partial and the next pull resumes with a Range request', async t => {
  const repo = storiesRepo()
  const data = 'onnx/model_q4.onnx_data'
  const size = repo.files.get(data)!.length
  const cut = Math.floor(size / 2)
  repo.cutOnce = new Map([[data, cut]])
  const dir = join(t.testdir(), 'stories')
  repo.cutWhen = (path, bytes) => partialReaches(dir, path, bytes)
  const hub = await hubWith(t, repo)
  const hubLoc = { endpoint: hub.url, repo: REPO, revision: 'main' }

  await t.rejects(pullModel({ hub: hubLoc, dir, dtype: 'q4', retries: 0 }), {
    name: 'DownloadInterruptedError',
    message: new RegExp(`download of ${data} was interrupted after ${cut} of ${size} bytes.*run the same command again to resume`),
  })
  t.notOk(existsSync(join(dir, data)), 'no file under the final name')
  t.equal(statSync(join(dir, data + '.partial')).size, cut, 'the bytes received are kept')

  const resumeEvents: PullEvent[] = []
  await pullModel({ hub: hubLoc, dir, dtype: 'q4', retries: 0, onEvent: e => resumeEvents.push(e) })
  const last = hub.downloads().filter(r => r.url.endsWith(data)).at(-1)
  t.equal(last?.range, `bytes=${cut}-`, 'asked only for the rest')
  t.ok(resumeEvents.some(e => e.type === 'file-start' && e.file.path === data && e.resumeFrom === cut), 'reported as a resume')
  t.ok(same(dir, data), 'the resumed file is byte-identical')
  t.notOk(existsSync(join(dir, data + '.partial')))
})

t.test('a broken connection is retried within the same pull, resuming', async t => {
  const repo = storiesRepo()
  const graph = 'onnx/model_q4.onnx'
  repo.cutOnce = new Map([[graph, 100]])
  const dir = join(t.testdir(), 'stories')
  repo.cutWhen = (path, bytes) => partialReaches(dir, path, bytes)
  const hub = await hubWith(t, repo)
  const events: PullEvent[] = []
  await pullModel({ hub: { endpoint: hub.url, repo: REPO, revision: 'main' }, dir, dtype: 'q4', retries: 2, retryDelayMs: 10, onEvent: e => events.push(e) })
  t.ok(events.some(e => e.type === 'retry' && e.file.path === graph))
  t.same(hub.downloads().filter(r => r.url.endsWith(graph)).map(r => r.range), [undefined, 'bytes=100-'])
  t.ok(same(dir, graph))
})

t.test('a file whose bytes do not match the published hash is removed, and the error says so', async t => {
  const repo = storiesRepo()
  repo.corrupt = new Set(['onnx/model_q4.onnx_data'])
  const hub = await hubWith(t, repo)
  const dir = join(t.testdir(), 'stories')
  const hubLoc = { endpoint: hub.url, repo: REPO, revision: 'main' }
  await t.rejects(pullModel({ hub: hubLoc, dir, dtype: 'q4' }), {
    name: 'IntegrityError',
    message: /onnx\/model_q4\.onnx_data: sha256 mismatch \(expected [0-9a-f]{64}, got [0-9a-f]{64}\); the corrupt download was removed/,
  })
  t.notOk(existsSync(join(dir, 'onnx/model_q4.onnx_data')), 'no corrupt file under the final name')
  t.notOk(existsSync(join(dir, 'onnx/model_q4.onnx_data.partial')), 'and no partial to resume from')
  t.ok(same(dir, 'onnx/model_q4.onnx'), 'files verified before it stay')

  // Small files are checked against their git blob id.
  repo.corrupt = new Set(['tokenizer.json'])
  const dir2 = join(t.testdir(), 'stories2')
  await t.rejects(pullModel({ hub: hubLoc, dir: dir2, dtype: 'q4' }), { name: 'IntegrityError', message: /tokenizer\.json: git blob sha1 mismatch/ })
  t.notOk(existsSync(join(dir2, 'tokenizer.json')))

  // Once the hub serves the right bytes, the same command completes.
  repo.corrupt = undefined
  await pullModel({ hub: hubLoc, dir, dtype: 'q4' })
  t.ok(same(dir, 'onnx/model_q4.onnx_data'))
})

t.test('a gated repository: no HF_TOKEN or a refused one gives a clear error; the right one downloads', async t => {
  const repo = storiesRepo()
  repo.gated = true
  const hub = await hubWith(t, repo)
  const dir = join(t.testdir(), 'stories')
  const hubLoc = { endpoint: hub.url, repo: REPO, revision: 'main' }
  await t.rejects(pullModel({ hub: hubLoc, dir, dtype: 'q4' }), {
    name: 'HubAuthError',
    message: `${REPO} is gated or private (HTTP 401): set HF_TOKEN to a Hugging Face access token whose account has access to it`,
  })
  const wrong = 'hf_notthetoken'
  const err = await pullModel({ hub: { ...hubLoc, token: wrong }, dir, dtype: 'q4' }).catch((e: Error) => e)
  t.match(err, { name: 'HubAuthError', message: /refused HF_TOKEN for test-org\/stories260k-ONNX \(HTTP 403\)/ })
  t.notMatch((err as Error).message, wrong, 'the token is never in a message')

  await pullModel({ hub: { ...hubLoc, token: TOKEN }, dir, dtype: 'q4' })
  t.ok(same(dir, 'onnx/model_q4.onnx_data'))
  t.ok(hub.requests.filter(r => r.url.startsWith('/api/') || r.url.includes('/resolve/')).every(r => r.authorization === undefined || r.authorization === `Bearer ${TOKEN}` || r.authorization === `Bearer ${wrong}`))
})

t.test('an unreachable hub is named in the error; an unknown repository or dtype is explained', async t => {
  const dir = join(t.testdir(), 'stories')
  await t.rejects(pullModel({ hub: { endpoint: REFUSED_URL, repo: REPO, revision: 'main' }, dir, dtype: 'q4', retries: 0 }), {
    name: 'HubUnreachableError',
    message: /^could not reach the Hugging Face Hub at http:\/\/127\.0\.0\.1:2: .*ECONNREFUSED/,
  })

  const hub = await hubWith(t, storiesRepo())
  await t.rejects(pullModel({ hub: { endpoint: hub.url, repo: 'nobody/nothing', revision: 'main' }, dir, dtype: 'q4' }), { message: /nobody\/nothing \(revision main\) was not found/ })
  await t.rejects(pullModel({ hub: { endpoint: hub.url, repo: REPO, revision: 'main' }, dir, dtype: 'q4f16' }), {
    message: 'test-org/stories260k-ONNX has no onnx/model_q4f16.onnx for dtype q4f16; it has onnx/model_fp16.onnx, onnx/model_q4.onnx',
  })
})
