// `chatd pull` as an operator runs it: models.json names the repository, the
// files land in the model's path (or under MODELS_DIR), progress is printed
// as plain lines when there is no terminal, and failures exit 1 with a message.

import { existsSync, readFileSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import t from 'tap'
import { cli, withEnv } from '../helpers/cli.ts'
import { storiesModelDir } from '../helpers/models.ts'
import { REFUSED_URL } from '../helpers/refused.ts'
import { repoFromDir, startHub } from './hub-server.ts'

const REPO = 'test-org/stories260k-ONNX'
const source = storiesModelDir('int4')

t.test('chatd pull <id> downloads into the model\'s path and prints plain progress lines', async t => {
  const repo = repoFromDir(source)
  repo.gated = true
  const hub = await startHub({ [REPO]: repo })
  t.teardown(hub.close)
  const dir = t.testdir()
  writeFileSync(join(dir, 'models.json'), JSON.stringify({
    models: [
      { id: 'stories', backend: 'onnx', path: 'stories', dtype: 'q4', hubRepo: REPO },
      { id: 'u', backend: 'openai', baseUrl: 'http://x', upstreamModel: 'y' },
    ]
  }))
  withEnv(t, { MODELS_FILE: join(dir, 'models.json'), HF_ENDPOINT: hub.url })

  const denied = await cli(['pull', 'stories'])
  t.equal(denied.code, 1)
  t.match(denied.err, `chatd pull: ${REPO} is gated or private (HTTP 401): set HF_TOKEN`)

  withEnv(t, { HF_TOKEN: 'hf_loopbacktesttoken' })
  const pulled = await cli(['pull', 'stories'])
  t.equal(pulled.code, 0, pulled.err)
  t.match(pulled.out, `pulling stories from ${hub.url}/${REPO} (main, dtype q4) into ${join(dir, 'stories')}`)
  t.match(pulled.out, /\n7 files, [\d.]+ KiB in all; 7 to download\n/)
  t.match(pulled.out, /downloading onnx\/model_q4\.onnx_data \([\d.]+ KiB\)\n/)
  t.match(pulled.out, /onnx\/model_q4\.onnx_data: done in [\d.]+ s\n/)
  t.match(pulled.out, /complete: 7 files, [\d.]+ KiB, verified\n/)
  t.match(pulled.out, /stories is ready: 7 files/)
  t.notMatch(pulled.out + pulled.err, 'hf_loopbacktesttoken', 'the token is never printed')
  t.ok(readFileSync(join(dir, 'stories/onnx/model_q4.onnx_data')).equals(readFileSync(join(source, 'onnx/model_q4.onnx_data'))))

  const again = await cli(['pull'])
  t.equal(again.code, 0, 'no id: every local model with a hubRepo')
  t.match(again.out, /7 files, [\d.]+ KiB in all; all already complete/)

  t.match(await cli(['pull', 'u']), { code: 1, err: /nothing to download/ })
})

t.test('MODELS_DIR moves the model directories; an unreachable hub is named', async t => {
  const hub = await startHub({ [REPO]: repoFromDir(source) })
  t.teardown(hub.close)
  const dir = t.testdir({ 'models.json': JSON.stringify({ models: [{ id: 'stories', backend: 'onnx', path: 'stories', dtype: 'q4', hubRepo: REPO }] }) })
  withEnv(t, { MODELS_FILE: join(dir, 'models.json'), MODELS_DIR: join(dir, 'volume'), HF_ENDPOINT: hub.url })
  t.match(await cli(['pull', 'stories']), { code: 0 })
  t.ok(existsSync(join(dir, 'volume/stories/onnx/model_q4.onnx')))

  await hub.close()
  withEnv(t, { HF_ENDPOINT: REFUSED_URL }) // the hub is gone (its closed port could be anyone's by now)
  const offline = await cli(['pull', '--if-missing'])
  t.equal(offline.code, 0, '--if-missing: complete models need no hub (an offline restart of model-init)')
  t.match(offline.out, `stories: every file is already in ${join(dir, 'volume/stories')}`)

  withEnv(t, { MODELS_DIR: join(dir, 'other') })
  t.match(await cli(['pull', '--if-missing']), { code: 1, err: /could not reach the Hugging Face Hub/ }, 'missing files still need the hub')
  const failed = await cli(['pull', 'stories'])
  t.equal(failed.code, 1)
  t.match(failed.err, `chatd pull: could not reach the Hugging Face Hub at ${REFUSED_URL}`)
})
