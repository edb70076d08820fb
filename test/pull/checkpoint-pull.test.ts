// The default model's way in: `chatd pull` fetches a Hugging Face checkpoint
// (bf16 safetensors, sharded or not, at a pinned revision), converts it here
// with chatd's converter, checks that the result loads and runs, and leaves a
// model directory the engine serves: the form `npm run bench` measures.
// stories260k stands in for DeepSeek-R1-Distill-Qwen-1.5B: its fp32 weights
// are written here as a two-shard bf16 checkpoint, as deepseek-ai publishes.
import { copyFileSync, existsSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import t from 'tap'
import { loadConfig } from '../../src/config.ts'
import { startServer } from '../../src/server.ts'
import { convertCheckpoint } from '../../src/convert/index.ts'
import { SafetensorsFile } from '../../src/convert/safetensors.ts'
import { OnnxBackend } from '../../src/engine/onnx/backend.ts'
import { pullCheckpoint, selectCheckpointFiles } from '../../src/pull/checkpoint.ts'
import type { PullEvent } from '../../src/pull/pull.ts'
import { cli, withEnv } from '../helpers/cli.ts'
import { STORIES_SOURCE } from '../helpers/models.ts'
import { partialReaches, repoFromDir, startHub } from './hub-server.ts'

const REPO = 'test-org/stories260k-checkpoint'
const REVISION = '0123456789abcdef0123456789abcdef01234567'

/** float32 -> bfloat16 bits, rounding to nearest even (what torch does). */
function toBf16 (data: Float32Array): Uint16Array {
  const bits = new Uint32Array(data.buffer, data.byteOffset, data.length)
  const out = new Uint16Array(data.length)
  for (let i = 0; i < data.length; i++) {
    const b = bits[i]
    out[i] = (b + 0x7fff + ((b >>> 16) & 1)) >>> 16
  }
  return out
}

function writeSafetensors (file: string, tensors: Array<{ name: string; shape: number[]; bytes: Uint8Array }>): void {
  const header: Record<string, unknown> = { __metadata__: { format: 'pt' } }
  let offset = 0
  for (const t of tensors) {
    header[t.name] = { dtype: 'BF16', shape: t.shape, data_offsets: [offset, offset + t.bytes.length] }
    offset += t.bytes.length
  }
  const json = Buffer.from(JSON.stringify(header))
  const length = Buffer.alloc(8)
  length.writeBigUInt64LE(BigInt(json.length))
  writeFileSync(file, Buffer.concat([length, json, ...tensors.map(t => Buffer.from(t.bytes.buffer, t.bytes.byteOffset, t.bytes.byteLength))]))
}

/** stories260k as a bf16 checkpoint in two shards with their index, config and tokenizer files beside. */
function bf16Checkpoint (dir: string): string {
  const source = new SafetensorsFile(join(STORIES_SOURCE, 'model.safetensors'))
  const names = source.names().sort()
  const shards: Array<Array<{ name: string; shape: number[]; bytes: Uint8Array }>> = [[], []]
  names.forEach((name, i) => {
    const tensor = source.read(name)
    shards[i < names.length / 2 ? 0 : 1].push({ name, shape: tensor.shape, bytes: new Uint8Array(toBf16(tensor.data).buffer) })
  })
  source.close()
  const weightMap: Record<string, string> = {}
  shards.forEach((tensors, i) => {
    const file = `model-0000${i + 1}-of-00002.safetensors`
    writeSafetensors(join(dir, file), tensors)
    for (const t of tensors) weightMap[t.name] = file
  })
  writeFileSync(join(dir, 'model.safetensors.index.json'), JSON.stringify({ metadata: {}, weight_map: weightMap }))
  const config = JSON.parse(readFileSync(join(STORIES_SOURCE, 'config.json'), 'utf8'))
  writeFileSync(join(dir, 'config.json'), JSON.stringify({ ...config, torch_dtype: 'bfloat16' }))
  for (const file of ['generation_config.json', 'tokenizer.json', 'tokenizer_config.json', 'special_tokens_map.json']) {
    copyFileSync(join(STORIES_SOURCE, file), join(dir, file))
  }
  return dir
}

t.test('bf16 shards read back as the float32 values rounded to bfloat16', async t => {
  const dir = bf16Checkpoint(t.testdir())
  const original = new SafetensorsFile(join(STORIES_SOURCE, 'model.safetensors'))
  const shard = new SafetensorsFile(join(dir, 'model-00001-of-00002.safetensors'))
  const name = shard.names()[0]
  const exact = original.read(name).data
  const read = shard.read(name).data
  const rounded = new Float32Array(new Uint32Array(Array.from(toBf16(exact), b => b << 16)).buffer)
  t.same(Array.from(read), Array.from(rounded), `${name}: every value`)
  t.ok(read.some((v, i) => v !== exact[i]), 'bfloat16 really rounds (the comparison means something)')
  original.close()
  shard.close()
})

t.test('selectCheckpointFiles: config, tokenizer, the index and every shard; nothing else', async t => {
  const file = (path: string) => ({ path, size: 1 })
  const listing = ['README.md', 'config.json', 'tokenizer.json', 'tokenizer_config.json', 'generation_config.json', 'model.safetensors.index.json',
    'model-00002-of-00002.safetensors', 'model-00001-of-00002.safetensors', 'figures/benchmark.jpg', 'onnx/model.onnx'].map(file)
  t.same(selectCheckpointFiles(listing, REPO).map(f => f.path), ['config.json', 'tokenizer.json', 'tokenizer_config.json', 'generation_config.json',
    'model.safetensors.index.json', 'model-00001-of-00002.safetensors', 'model-00002-of-00002.safetensors'])
  t.throws(() => selectCheckpointFiles([file('config.json'), file('tokenizer.json'), file('tokenizer_config.json'), file('pytorch_model.bin')], REPO),
    /has no model.safetensors .*: chatd converts safetensors checkpoints only/)
})

t.test('chatd pull with source "checkpoint": download, convert, verify; the model serves; a second pull does nothing', async t => {
  const work = t.testdir({ checkpoint: {}, reference: {}, project: {} })
  const checkpoint = bf16Checkpoint(join(work, 'checkpoint'))
  const repo = repoFromDir(checkpoint)
  // A connection cut in the middle of the first shard: the pull resumes it.
  repo.cutOnce = new Map([['model-00001-of-00002.safetensors', 20_000]])
  const project = join(work, 'project')
  repo.cutWhen = (path, bytes) => partialReaches(project, path, bytes)
  const hub = await startHub({ [REPO]: repo })
  t.teardown(hub.close)
  writeFileSync(join(project, 'models.json'), JSON.stringify({
    models: [
      { id: 'stories', backend: 'onnx', path: 'stories', source: 'checkpoint', hubRepo: REPO, hubRevision: REVISION, dtype: 'q4' },
    ]
  }))
  withEnv(t, { MODELS_FILE: join(project, 'models.json'), HF_ENDPOINT: hub.url, ONNX_DEVICE: 'cpu' })

  const pulled = await cli(['pull', 'stories'])
  t.equal(pulled.code, 0, pulled.err)
  const modelDir = join(project, 'stories')
  t.match(pulled.out, `pulling stories: the checkpoint ${hub.url}/${REPO} (${REVISION}), converted here to dtype q4 in the CPU form (ONNX_DEVICE=cpu), into ${modelDir}`)
  t.match(pulled.out, /resuming at/, 'the cut shard was resumed')
  t.match(pulled.out, /converting the checkpoint to int4 with chatd's converter/)
  t.match(pulled.out, /converting: \d+ of \d+ tensors\n/)
  t.match(pulled.out, /the converted model loads and runs/)
  t.ok(hub.requests.every(r => !r.url.includes('/resolve/') || r.url.includes(`/resolve/${REVISION}/`)), 'every file at the pinned revision')
  t.same(readdirSync(modelDir).sort(), ['chatd-source.json', 'config.json', 'generation_config.json', 'onnx', 'special_tokens_map.json', 'tokenizer.json', 'tokenizer_config.json'],
    'the model directory, and no checkpoint left behind')
  t.match(JSON.parse(readFileSync(join(modelDir, 'chatd-source.json'), 'utf8')), { repo: REPO, revision: REVISION, dtype: 'q4' })

  // Exactly what `chatd convert` makes of the same checkpoint by hand.
  const reference = convertCheckpoint({ from: checkpoint, out: join(work, 'reference'), weights: 'int4', promptGraph: true })
  t.ok(readFileSync(join(modelDir, 'onnx/model_q4.onnx_data')).equals(readFileSync(reference.onnxFile + '_data')), 'same weights as chatd convert --from')
  t.ok(readFileSync(join(modelDir, 'onnx/model_prompt.onnx_data')).equals(readFileSync(join(work, 'reference/onnx/model_prompt.onnx_data'))),
    'and the int8 prompt graph of chatd convert --prompt-graph')

  const backend = new OnnxBackend({ id: 'stories', path: modelDir, dtype: 'q4', device: 'cpu', threads: 1 })
  await backend.load()
  t.teardown(() => backend.close())
  t.equal(backend.contextLength, 512)
  let text = ''
  for await (const e of backend.generate({ messages: [{ role: 'user', content: 'Once upon a time' }], temperature: 0, topP: 1, topK: 0, stop: [], maxTokens: 30 }, new AbortController().signal)) {
    if (e.type === 'delta') text += e.content ?? ''
  }
  t.ok(text.length > 20, `it tells a story: ${JSON.stringify(text)}`)

  const downloads = hub.downloads().length
  const again = await cli(['pull', 'stories'])
  t.equal(again.code, 0, again.err)
  t.equal(hub.downloads().length, downloads, 'the same source and revision, already converted: nothing downloaded')
  t.match(again.out, new RegExp(`stories is already complete in ${modelDir} \\(\\d+(\\.\\d+)? [KMG]?i?B\\): nothing to download\\n$`))
  t.notMatch(again.out, /0 files|0 B/, 'no count of nothing')

  // A model pulled before chatd wrote prompt graphs: the next pull converts again to add it.
  for (const suffix of ['', '_data']) rmSync(join(modelDir, `onnx/model_prompt.onnx${suffix}`))
  const upgrade = await cli(['pull', 'stories'])
  t.equal(upgrade.code, 0, upgrade.err)
  t.match(upgrade.out, /converting the checkpoint to int4/)
  t.ok(existsSync(join(modelDir, 'onnx/model_prompt.onnx')), 'the prompt graph is added')
})

t.test('a model that runs on WebGPU is pulled in the GPU form; on the CPU, in the CPU form; --if-missing leaves the other form and says so', async t => {
  const work = t.testdir({ checkpoint: {}, reference: {}, project: {} })
  const checkpoint = bf16Checkpoint(join(work, 'checkpoint'))
  const hub = await startHub({ [REPO]: repoFromDir(checkpoint) })
  t.teardown(hub.close)
  const project = join(work, 'project')
  const modelsFile = join(project, 'models.json')
  const entry = { id: 'stories', backend: 'onnx', path: 'stories', source: 'checkpoint', hubRepo: REPO, hubRevision: REVISION, dtype: 'q4' }
  const onDevice = (device: string) => writeFileSync(modelsFile, JSON.stringify({ models: [{ ...entry, device }] }))
  withEnv(t, { MODELS_FILE: modelsFile, HF_ENDPOINT: hub.url })
  const modelDir = join(project, 'stories')
  const form = () => JSON.parse(readFileSync(join(modelDir, 'chatd-source.json'), 'utf8')).form

  onDevice('webgpu')
  const gpu = await cli(['pull', 'stories'])
  t.equal(gpu.code, 0, gpu.err)
  t.match(gpu.out, 'converted here to dtype q4 in the GPU form (models.json entry "stories"\'s "device": "webgpu")')
  t.equal(form(), 'gpu', 'the source record names the form')
  t.same(readdirSync(join(modelDir, 'onnx')).sort(), ['model_q4.onnx', 'model_q4.onnx_data'], 'no int8 prompt graph: a GPU runs prompts on the main graph')
  // stories260k's 8-wide heads are too narrow for GroupQueryAttention: plain attention, concat cache, int4 in float32.
  const reference = convertCheckpoint({ from: checkpoint, out: join(work, 'reference'), weights: 'int4', cache: 'concat', int4Compute: 'float' })
  t.ok(readFileSync(join(modelDir, 'onnx/model_q4.onnx')).equals(readFileSync(reference.onnxFile)), 'the graph of chatd convert --cache concat --int4-compute float')
  t.ok(readFileSync(join(modelDir, 'onnx/model_q4.onnx_data')).equals(readFileSync(reference.onnxFile + '_data')), 'and its weights')

  const downloads = hub.downloads().length
  const again = await cli(['pull', 'stories'])
  t.match(again.out, /already complete/, 'the same form again: nothing to do')
  t.equal(hub.downloads().length, downloads)

  onDevice('cpu')
  const kept = await cli(['pull', '--if-missing', 'stories'])
  t.equal(kept.code, 0, kept.err)
  t.match(kept.out, `stories: every file is already in ${modelDir}\nnote: stories in ${modelDir} is the GPU form, and models.json entry "stories"'s "device": "cpu" runs the CPU form faster: \`chatd pull stories\` converts it again`)
  t.equal(hub.downloads().length, downloads, '--if-missing asks nothing of the hub (an offline restart)')
  t.equal(form(), 'gpu', 'and leaves the model as it is')

  const cpu = await cli(['pull', 'stories'])
  t.equal(cpu.code, 0, cpu.err)
  t.match(cpu.out, 'in the CPU form (models.json entry "stories"\'s "device": "cpu")')
  t.equal(form(), 'cpu')
  t.ok(existsSync(join(modelDir, 'onnx/model_prompt.onnx')), 'the CPU form has its int8 prompt graph')
  const quiet = await cli(['pull', '--if-missing', 'stories'])
  t.notMatch(quiet.out, /note:/, 'the form the device runs: no note')
})

t.test('a checkpoint that cannot be converted leaves no model behind, and says why', async t => {
  const work = t.testdir({ checkpoint: {}, model: {} })
  const checkpoint = bf16Checkpoint(join(work, 'checkpoint'))
  // A config whose sizes do not match the weights.
  const config = JSON.parse(readFileSync(join(checkpoint, 'config.json'), 'utf8'))
  writeFileSync(join(checkpoint, 'config.json'), JSON.stringify({ ...config, hidden_size: 128 }))
  const hub = await startHub({ [REPO]: repoFromDir(checkpoint) })
  t.teardown(hub.close)
  const events: PullEvent[] = []
  const dir = join(work, 'model')
  await t.rejects(pullCheckpoint({ hub: { endpoint: hub.url, repo: REPO, revision: REVISION }, dir, dtype: 'q4', onEvent: e => events.push(e) }),
    { name: 'PullError', message: /converting the checkpoint failed: .*tensor .* has shape \[\d+,64\], config.json implies \[\d+,128\]/ })
  t.notOk(existsSync(join(dir, 'onnx')), 'no graph in the model directory')
  t.ok(existsSync(join(dir, 'checkpoint', 'config.json')), 'the download is kept for the next try')
  await t.rejects(pullCheckpoint({ hub: { endpoint: hub.url, repo: REPO, revision: REVISION }, dir, dtype: 'int8' }), /dtype int8 cannot be made from a checkpoint/)
})

t.test('chatd serve on a fresh machine: auto-pull downloads and converts the checkpoint, then the model answers', async t => {
  const work = t.testdir({ checkpoint: {}, project: {} })
  const hub = await startHub({ [REPO]: repoFromDir(bf16Checkpoint(join(work, 'checkpoint'))) })
  t.teardown(hub.close)
  const project = join(work, 'project')
  writeFileSync(join(project, 'models.json'), JSON.stringify({
    models: [
      { id: 'stories', backend: 'onnx', path: 'stories', source: 'checkpoint', hubRepo: REPO, hubRevision: REVISION, dtype: 'q4', device: 'cpu' },
    ]
  }))
  const key = `sk-chatd-${'autoConvert'.repeat(2)}abcdefghij`
  const app = await startServer(loadConfig({
    PORT: '0', LOG_LEVEL: 'silent', DATABASE_URL: `sqlite://${join(project, 'chatd.db')}`, MODELS_FILE: join(project, 'models.json'), CHATD_ADMIN_KEY: key, HF_ENDPOINT: hub.url,
  }), { print: () => {}, logger: false })
  t.teardown(() => app.close())
  t.equal((await app.inject({ url: '/healthz' })).statusCode, 200, 'the server answers while it converts')
  const deadline = Date.now() + 60_000
  while ((await app.inject({ url: '/readyz' })).statusCode !== 200) {
    if (Date.now() > deadline) throw new Error('the converted model did not become ready')
    await new Promise(resolve => setTimeout(resolve, 50))
  }
  const res = await app.inject({
    method: 'POST',
    url: '/api/v1/chat/completions',
    headers: { authorization: `Bearer ${key}` },
    payload: { model: 'stories', messages: [{ role: 'user', content: 'Once upon a time' }], max_tokens: 8, temperature: 0 },
  })
  t.equal(res.statusCode, 200, res.body)
  t.equal(res.json().usage.completion_tokens, 8)
})
