// The local engine end to end through its worker thread, on the real
// stories260k model and on tiny random models.
import fs from 'node:fs'
import path from 'node:path'
import t, { type Test } from 'tap'
import type { GenerateEvent, GenerateRequest } from '../../../../src/engine/backend.ts'
import { ApiError } from '../../../../src/errors.ts'
import { DecoderSession } from '../../../../src/engine/onnx/device/decoder-session.ts'
import { cacheLayoutFor } from '../../../../src/engine/onnx/cache/kv-cache.ts'
import { OnnxBackend } from '../../../../src/engine/onnx/backend.ts'
import { soloPrefillChunk } from '../../../../src/engine/onnx/scheduler/engine.ts'
import { readModelDir } from '../../../../src/engine/onnx/model-dir.ts'
import { loadTokenizer } from '../../../../src/engine/onnx/text/tokenizer.ts'
import { randomModelDir, storiesModelDir } from '../../../helpers/models.ts'
import { testDevice } from '../../../helpers/webgpu.ts'
import { goldens, replayGolden } from '../../../../scripts/bench/exactness.ts'

const GREEDY = { temperature: 0, topP: 1, topK: 0, stop: [] as string[] }
const never = new AbortController().signal

async function collect (events: AsyncIterable<GenerateEvent>): Promise<{ deltas: string[]; text: string; finish: Extract<GenerateEvent, { type: 'finish' }> }> {
  const deltas: string[] = []
  let finish: Extract<GenerateEvent, { type: 'finish' }> | undefined
  for await (const e of events) {
    if (e.type === 'delta') deltas.push(e.content ?? '')
    else finish = e
  }
  if (!finish) throw new Error('stream ended without a finish event')
  return { deltas, text: deltas.join(''), finish }
}

async function startBackend (t: Test, dir: string, dtype = 'fp32'): Promise<OnnxBackend> {
  const backend = new OnnxBackend({ id: 'test-model', path: dir, dtype, device: testDevice(), threads: 1 })
  await backend.load()
  t.teardown(() => backend.close())
  return backend
}

for (const cacheStyle of ['append', 'concat'] as const) {
  t.test(`stories260k (${cacheStyle} cache): greedy decoding reproduces the reference token for token`, async t => {
    const model = readModelDir(storiesModelDir('fp32', cacheStyle), 'fp32')
    const session = await DecoderSession.load(model, { device: testDevice(), threads: 1 })
    t.equal(session.cacheOutputs, cacheStyle, 'cache outputs discovered from the graph')
    const layout = cacheLayoutFor(session)
    for (const golden of goldens) {
      const { ids, cached } = await replayGolden(layout, golden)
      t.same(ids, golden.generated_ids, `"${golden.prompt}"`)
      t.same(cached, [golden.prompt_ids.length + golden.generated_ids.length - 1], 'every fed token is cached')
    }
    await session.close()
  })
}

t.test('stories260k through the engine worker: goldens as text, usage, finish reason', async t => {
  const backend = await startBackend(t, storiesModelDir())
  t.equal(backend.state().state, 'ready')
  t.equal(backend.contextLength, 512)
  const tokenizer = await loadTokenizer(storiesModelDir())
  for (const golden of goldens) {
    const request: GenerateRequest = { ...GREEDY, messages: [{ role: 'user', content: golden.prompt }], maxTokens: golden.generated_ids.length }
    const { deltas, text, finish } = await collect(backend.generate(request, never))
    t.equal(text, golden.completion_text, `"${golden.prompt}" text`)
    const all = [...golden.prompt_ids, ...golden.generated_ids]
    t.equal(text, tokenizer.decode(all).slice(tokenizer.decode(golden.prompt_ids).length), 'text equals the decoded reference ids')
    t.notOk(deltas.some(d => d.includes('\uFFFD')), 'no delta holds a partial character')
    t.equal(finish.reason, 'length')
    t.same(finish.usage, {
      prompt_tokens: golden.prompt_ids.length,
      completion_tokens: golden.generated_ids.length,
      total_tokens: golden.prompt_ids.length + golden.generated_ids.length,
      prompt_tokens_details: { cached_tokens: 0 },
      completion_tokens_details: { reasoning_tokens: 0 },
    }, 'usage counts the template-rendered prompt and every generated token')
  }
})

t.test('the fp16 and int4 builds of stories260k run through the engine', async t => {
  for (const [weights, dtype] of [['fp16', 'fp16'], ['int4', 'q4']] as const) {
    const backend = await startBackend(t, storiesModelDir(weights), dtype)
    const { text, finish } = await collect(backend.generate({ ...GREEDY, messages: [{ role: 'user', content: 'Once upon a time' }], maxTokens: 20 }, never))
    t.ok(text.length > 20, `${weights}: produced text`)
    t.equal(finish.usage.completion_tokens, 20)
    if (weights === 'fp16') t.equal(text, goldens[0].completion_text.slice(0, text.length), 'fp16 follows the fp32 reference')
  }
})

t.test('the model stops at any id of eos_token_id (stories260k ends stories with <s>)', async t => {
  const backend = await startBackend(t, storiesModelDir())
  // Long enough that the model finishes its story and emits id 1.
  const { text, finish } = await collect(backend.generate({ ...GREEDY, messages: [{ role: 'user', content: 'Once upon a time' }] }, never))
  t.equal(finish.reason, 'stop')
  t.ok(finish.usage.completion_tokens < 512 - 5, 'stopped before the context ended')
  t.notMatch(text, /<s>|<\/s>/, 'the end token is not in the text')
})

t.test('streamed deltas concatenate to the whole text; stop strings never leak', async t => {
  const backend = await startBackend(t, storiesModelDir())
  const base = { ...GREEDY, messages: [{ role: 'user' as const, content: 'Once upon a time' }], maxTokens: 64 }
  const full = (await collect(backend.generate(base, never))).text
  t.equal(full, goldens[0].completion_text)
  // "little girl" spans tokens; the text before it must come out, the stop string never.
  for (const stop of ['little girl', 'Lily.', 'e', ' park. One']) {
    const { deltas, text, finish } = await collect(backend.generate({ ...base, stop: [stop] }, never))
    const cut = full.indexOf(stop)
    t.equal(text, full.slice(0, cut), `stop ${JSON.stringify(stop)}: text ends right before it`)
    t.notOk(deltas.join('').includes(stop), 'stop string not emitted')
    t.equal(finish.reason, 'stop')
    t.equal(finish.stopSequence, stop, 'the finish names the stop string that ended it')
  }
  // Of several, the one that matched first in the text; a natural end names none.
  const both = await collect(backend.generate({ ...base, stop: [' park. One', 'Lily.'] }, never))
  t.equal(both.finish.stopSequence, full.indexOf('Lily.') < full.indexOf(' park. One') ? 'Lily.' : ' park. One')
  t.equal((await collect(backend.generate({ ...base, stop: ['never in this story'] }, never))).finish.stopSequence, undefined)
})

t.test('sampling: same seed repeats, different seeds differ, top_k 1 is greedy', async t => {
  const backend = await startBackend(t, storiesModelDir())
  const messages = [{ role: 'user' as const, content: 'The dog' }]
  const sampled = (seed: number, extra: Partial<GenerateRequest> = {}) =>
    collect(backend.generate({ messages, temperature: 1, topP: 1, topK: 0, stop: [], seed, maxTokens: 40, ...extra }, never)).then(r => r.text)
  const a = await sampled(1)
  t.equal(await sampled(1), a, 'same seed, same text')
  const others = await Promise.all([2, 3, 4].map(s => sampled(s)))
  t.ok(others.some(o => o !== a), 'different seeds give different text')
  const greedy = (await collect(backend.generate({ ...GREEDY, messages, maxTokens: 40 }, never))).text
  t.equal(await sampled(9, { topK: 1 }), greedy, 'top_k = 1 equals greedy')
})

t.test('a prompt left inside <think> makes the output reasoning until the model closes it', async t => {
  const dir = t.testdir({})
  fs.cpSync(storiesModelDir(), dir, { recursive: true })
  const configPath = path.join(dir, 'tokenizer_config.json')
  const config = JSON.parse(fs.readFileSync(configPath, 'utf8'))
  // The stories template with an R1-style opening of the thinking block at the end.
  fs.writeFileSync(configPath, JSON.stringify({ ...config, chat_template: config.chat_template + "{{- ' <think>' -}}" }))
  const backend = await startBackend(t, dir)
  const reasoning: string[] = []
  const content: string[] = []
  let finish: GenerateEvent | undefined
  for await (const e of backend.generate({ ...GREEDY, messages: [{ role: 'user', content: 'Once upon a time' }], maxTokens: 30 }, never)) {
    if (e.type === 'delta') {
      if (e.reasoning) reasoning.push(e.reasoning)
      if (e.content) content.push(e.content)
    } else finish = e
  }
  t.ok(reasoning.join('').length > 20, 'the text came as reasoning')
  t.same(content, [], 'no answer: the model never closed the block')
  t.match(finish, { type: 'finish', reason: 'length' }, 'finish_reason says why it ended')
  // The unchanged model directory is unaffected: a model that never reasons writes content.
  const plain = await startBackend(t, storiesModelDir())
  const events = []
  for await (const e of plain.generate({ ...GREEDY, messages: [{ role: 'user', content: 'Once upon a time' }], maxTokens: 10 }, never)) events.push(e)
  t.notOk(events.some(e => e.type === 'delta' && e.reasoning), 'stories260k writes no reasoning')
})

t.test('context length is checked before any work', async t => {
  const backend = await startBackend(t, storiesModelDir())
  const request: GenerateRequest = { ...GREEDY, messages: [{ role: 'user', content: 'Once upon a time' }], maxTokens: 600 }
  const failure = async (r: GenerateRequest): Promise<unknown> => {
    try {
      await collect(backend.generate(r, never))
    } catch (err) {
      return err
    }
    return null
  }
  const tooMany = await failure(request)
  t.ok(tooMany instanceof ApiError, 'an API error')
  t.match(tooMany, { code: 'context_length_exceeded', param: 'max_tokens', message: /context length is 512 tokens; the prompt has 5/ })
  const long = 'word '.repeat(600)
  t.match(await failure({ ...GREEDY, messages: [{ role: 'user', content: long }] }), { code: 'context_length_exceeded', param: 'messages' })
})

t.test('cancelling through the AbortSignal stops generation and frees the request', async t => {
  const backend = await startBackend(t, randomModelDir('llama'))
  const controller = new AbortController()
  const events: GenerateEvent[] = []
  let deltasAtAbort = -1
  for await (const e of backend.generate({ ...GREEDY, messages: [{ role: 'user', content: 'hi' }], maxTokens: 200 }, controller.signal)) {
    events.push(e)
    if (events.length === 3) {
      controller.abort()
      deltasAtAbort = events.length
    }
  }
  const finish = events.at(-1)
  t.equal(finish?.type, 'finish')
  t.equal(finish?.type === 'finish' && finish.reason, 'cancelled')
  // The abort crosses to the engine's worker thread while it keeps stepping (a
  // tiny model's step is well under a millisecond), so how many deltas slip out
  // first depends on scheduling; what must hold is that generation ended long
  // before max_tokens (200).
  t.ok(events.length - deltasAtAbort < 100, `stopped early (${events.length - deltasAtAbort} events after abort)`)
  t.equal(backend.activeRequests, 0, 'no request left open')
  // The engine still serves the next request.
  const next = await collect(backend.generate({ ...GREEDY, messages: [{ role: 'user', content: 'hi' }], maxTokens: 5 }, never))
  t.equal(next.finish.usage.completion_tokens, 5)
})

t.test('a consumer that stops reading cancels the generation', async t => {
  const backend = await startBackend(t, randomModelDir('qwen2'))
  for await (const e of backend.generate({ ...GREEDY, messages: [{ role: 'user', content: 'hi' }], maxTokens: 400 }, never)) {
    if (e.type === 'delta') break
  }
  t.equal(backend.activeRequests, 0)
})

t.test('the main thread stays responsive while the model computes', async t => {
  const backend = await startBackend(t, randomModelDir('llama'))
  let ticks = 0
  const timer = setInterval(() => { ticks++ }, 5)
  const started = Date.now()
  await collect(backend.generate({ ...GREEDY, messages: [{ role: 'user', content: 'x'.repeat(100) }], maxTokens: 150 }, never))
  clearInterval(timer)
  const elapsed = Date.now() - started
  // A blocked event loop would see one or two ticks; a free one about elapsed/5.
  t.ok(ticks >= Math.floor(elapsed / 5 / 4), `${ticks} timer ticks in ${elapsed} ms`)
})

t.test('bad model directories fail at load naming the file and the problem', async t => {
  const good = storiesModelDir()
  const root = t.testdir({})
  const copy = (name: string, edit: (dir: string) => void): string => {
    const dir = path.join(root, name)
    fs.cpSync(good, dir, { recursive: true })
    edit(dir)
    return dir
  }
  const cases: Array<[string, string, RegExp]> = [
    ['missing tokenizer', copy('a', d => fs.rmSync(path.join(d, 'tokenizer.json'))), /tokenizer\.json: file missing/],
    ['missing onnx file', copy('b', d => fs.rmSync(path.join(d, 'onnx/model.onnx'))), /onnx\/model\.onnx: file missing/],
    ['missing external data', copy('c', d => fs.rmSync(path.join(d, 'onnx/model.onnx_data'))), /model\.onnx_data: external data file missing/],
    ['corrupt onnx', copy('d', d => fs.writeFileSync(path.join(d, 'onnx/model.onnx'), Buffer.from('this is not a protobuf model_onnx_data'))), /model\.onnx: onnxruntime cannot load it/],
    ['invalid config', copy('e', d => fs.writeFileSync(path.join(d, 'config.json'), '{ nope')), /config\.json: invalid JSON/],
    ['wrong layer count', copy('f', d => {
      const cfg = JSON.parse(fs.readFileSync(path.join(d, 'config.json'), 'utf8'))
      fs.writeFileSync(path.join(d, 'config.json'), JSON.stringify({ ...cfg, num_hidden_layers: 4 }))
    }), /model\.onnx: graph has 5 past_key_values layers but config\.json says num_hidden_layers 4/],
    ['wrong kv shape', copy('g', d => {
      const cfg = JSON.parse(fs.readFileSync(path.join(d, 'config.json'), 'utf8'))
      fs.writeFileSync(path.join(d, 'config.json'), JSON.stringify({ ...cfg, num_key_value_heads: 2 }))
    }), /cache shape .* does not match config\.json/],
  ]
  for (const [name, dir, pattern] of cases) {
    const backend = new OnnxBackend({ id: 'bad', path: dir, dtype: 'fp32', device: testDevice() })
    await t.rejects(backend.load(), pattern, name)
    const state = backend.state()
    t.equal(state.state, 'unavailable', `${name}: unavailable`)
    await backend.close()
  }
  const missing = new OnnxBackend({ id: 'absent', path: path.join(root, 'nowhere'), dtype: 'q4' })
  await t.rejects(missing.load(), /model directory not found/)
  const state = missing.state()
  t.equal(state.state === 'unavailable' && state.hint, 'npx chatd pull absent', 'a missing model points at the pull command')
})

t.test('a lone prompt goes in larger runs only where GroupQueryAttention runs on a GPU (measured faster there, the same tokens), bounded by the GPU memory its scores take', async t => {
  const onGpu = (graphStyle: 'gqa' | 'gqa-masked' | 'standard', numHeads = 12, device: 'webgpu' | 'cpu' | 'cuda' = 'webgpu') => ({ device, graphStyle, model: { numHeads } })
  // The 1.5B: 12 heads, a 16,384-token context.
  t.equal(soloPrefillChunk(onGpu('gqa-masked'), 16384), 2048, 'the GPU form on WebGPU')
  t.equal(soloPrefillChunk(onGpu('gqa'), 16384), 2048, "onnxruntime-genai's GroupQueryAttention graphs on WebGPU")
  t.equal(soloPrefillChunk(onGpu('gqa-masked'), 32768), 1344, 'twice the context: shorter runs (2 GiB of scores at most)')
  t.ok(4 * 12 * 1344 * 32768 <= 2 * 2 ** 30)
  t.equal(soloPrefillChunk(onGpu('gqa-masked', 28), 131072), 512, 'a long context on many heads: never below the CPU size')
  t.equal(soloPrefillChunk(onGpu('standard'), 16384), 512, 'plain attention on WebGPU: slower in larger runs (docs/performance.md)')
  t.equal(soloPrefillChunk(onGpu('gqa-masked', 12, 'cpu'), 16384), 512, "the CPU: attention's scratch memory is the host's")
  t.equal(soloPrefillChunk(onGpu('gqa', 12, 'cuda'), 16384), 512, 'CUDA: not measured')
})
