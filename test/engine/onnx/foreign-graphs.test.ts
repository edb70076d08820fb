// Decoder files chatd did not write: the stories260k weights exported the way
// onnx-community / optimum export decoders (no num_logits_to_keep, logits for
// every position, the whole cache returned each run, plain attention), as
// `chatd pull` fetches them. chatd must run them exactly, or refuse them at
// load with the file and the reason; never run them wrongly.
import fs from 'node:fs'
import path from 'node:path'
import ort from 'onnxruntime-node'
import t from 'tap'
import type { GenerateEvent, GenerateRequest } from '../../../src/engine/backend.ts'
import { convertCheckpoint, convertRandom } from '../../../src/convert/index.ts'
import { decodeModel, encodeModel } from '../../../src/convert/onnx-proto.ts'
import { DecoderSession } from '../../../src/engine/onnx/device/decoder-session.ts'
import { OnnxBackend } from '../../../src/engine/onnx/backend.ts'
import { readModelDir } from '../../../src/engine/onnx/model-dir.ts'
import { loadTokenizer } from '../../../src/engine/onnx/text/tokenizer.ts'
import { REPO_ROOT, STORIES_OPTIMUM, STORIES_SOURCE } from '../../helpers/models.ts'
import { startStoriesServer } from '../../helpers/stories-server.ts'
import { testDevice } from '../../helpers/webgpu.ts'

interface Golden { prompt: string; prompt_ids: number[]; generated_ids: number[]; completion_text: string }
const goldens: Golden[] = JSON.parse(fs.readFileSync(path.join(STORIES_SOURCE, 'goldens.json'), 'utf8')).cases
const KEY = `sk-chatd-${'foreignGraph'.repeat(2)}abcdefgh`
const GREEDY = { temperature: 0, topP: 1, topK: 0, stop: [] as string[] }
const never = new AbortController().signal

/**
 * The reference: a plain greedy loop straight on onnxruntime, as the fixture's README describes
 * it (the prompt in one run, then one token a step, the returned cache fed back), with none of
 * chatd's code in the way.
 */
async function plainGreedy (file: string, promptIds: number[], steps: number): Promise<number[]> {
  const session = await ort.InferenceSession.create(file, { intraOpNumThreads: 1 })
  const layers = session.inputNames.filter(n => /^past_key_values\.\d+\.key$/.test(n)).length
  const int64 = (values: number[]): ort.Tensor => new ort.Tensor('int64', BigInt64Array.from(values.map(BigInt)), [1, values.length])
  let past: Record<string, ort.Tensor> = {}
  for (let i = 0; i < layers; i++) {
    for (const kv of ['key', 'value']) past[`past_key_values.${i}.${kv}`] = new ort.Tensor('float32', new Float32Array(0), [1, 4, 0, 8])
  }
  let fed = 0
  let feed = promptIds
  const out: number[] = []
  while (out.length < steps) {
    const result = await session.run({
      input_ids: int64(feed),
      attention_mask: int64(new Array(fed + feed.length).fill(1)),
      position_ids: int64(feed.map((_, k) => fed + k)),
      ...past,
    })
    const [, positions, vocab] = result.logits.dims
    const last = (result.logits.data as Float32Array).subarray((positions - 1) * vocab, positions * vocab)
    let best = 0
    for (let v = 1; v < vocab; v++) if (last[v] > last[best]) best = v
    out.push(best)
    fed += feed.length
    feed = [best]
    past = {}
    for (let i = 0; i < layers; i++) {
      for (const kv of ['key', 'value']) past[`past_key_values.${i}.${kv}`] = result[`present.${i}.${kv}`]
    }
  }
  await session.release()
  return out
}

async function collect (events: AsyncIterable<GenerateEvent>): Promise<{ text: string; completion: number }> {
  let text = ''
  let completion = -1
  for await (const e of events) {
    if (e.type === 'delta') text += e.content ?? ''
    else completion = e.usage.completion_tokens
  }
  return { text, completion }
}

t.test('the fixture is the form chatd pull fetches: no num_logits_to_keep, every position\'s logits, the whole cache', async t => {
  for (const dtype of ['fp32', 'q4'] as const) {
    const session = await DecoderSession.load(readModelDir(STORIES_OPTIMUM, dtype), { device: testDevice(), threads: 1 })
    t.equal(session.hasLogitsToKeep, false, `${dtype}: no num_logits_to_keep input`)
    t.equal(session.cacheOutputs, 'concat', `${dtype}: present.N.* outputs`)
    t.equal(session.takesPaddedRows, true, `${dtype}: plain attention with position_ids takes padded rows`)
    // Three positions in, logitsToKeep 1: the last position's row only.
    const out = await session.forward({
      batch: 1, inputIds: [[1, 403, 407]], attentionMask: [[1, 1, 1]], positionIds: [[0, 1, 2]], past: session.emptyCache(1), logitsToKeep: 1,
    })
    t.equal(out.rows, 1)
    t.equal(out.logits.length, session.model.vocabSize, `${dtype}: one row of logits`)
    DecoderSession.disposeCache(out.present)
    await session.close()
  }
})

t.test('fp32 export: the public goldens through the HTTP API, one at a time and sent together', async t => {
  const { url } = await startStoriesServer(t, { modelId: 'stories-optimum', key: KEY, modelDir: STORIES_OPTIMUM, dtype: 'fp32', threads: 1 })
  const ask = async (golden: Golden): Promise<{ content: string; usage: Record<string, number> }> => {
    const res = await fetch(`${url}/api/v1/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${KEY}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'stories-optimum', messages: [{ role: 'user', content: golden.prompt }], temperature: 0, max_tokens: golden.generated_ids.length }),
    })
    t.equal(res.status, 200)
    const body = await res.json() as { choices: Array<{ message: { content: string } }>; usage: Record<string, number> }
    return { content: body.choices[0].message.content, usage: body.usage }
  }
  for (const golden of goldens) {
    const { content, usage } = await ask(golden)
    t.equal(content, golden.completion_text, `alone: "${golden.prompt}"`)
    t.same(usage, {
      prompt_tokens: golden.prompt_ids.length,
      completion_tokens: golden.generated_ids.length,
      total_tokens: golden.prompt_ids.length + golden.generated_ids.length,
      prompt_tokens_details: { cached_tokens: 0 },
      completion_tokens_details: { reasoning_tokens: 0 },
    })
  }
  const together = await Promise.all(goldens.map(ask))
  together.forEach((r, i) => t.equal(r.content, goldens[i].completion_text, `together: "${goldens[i].prompt}"`))
})

t.test('q4 export (MatMulNBits without accuracy_level): greedy output equals a plain greedy loop over the same file', async t => {
  const backend = new OnnxBackend({ id: 'stories-optimum-q4', path: STORIES_OPTIMUM, dtype: 'q4', device: testDevice(), threads: 1 })
  await backend.load()
  t.teardown(() => backend.close())
  const tokenizer = await loadTokenizer(STORIES_OPTIMUM)
  const steps = 40
  const expected: string[] = []
  for (const golden of goldens) {
    const ids = await plainGreedy(path.join(STORIES_OPTIMUM, 'onnx/model_q4.onnx'), golden.prompt_ids, steps)
    const stop = ids.indexOf(1) // stories260k ends a story with <s> (its eos id)
    const kept = stop >= 0 ? ids.slice(0, stop) : ids
    expected.push(tokenizer.decode([...golden.prompt_ids, ...kept]).slice(tokenizer.decode(golden.prompt_ids).length))
  }
  const request = (golden: Golden): GenerateRequest => ({ ...GREEDY, messages: [{ role: 'user', content: golden.prompt }], maxTokens: steps })
  for (const [i, golden] of goldens.entries()) {
    t.equal((await collect(backend.generate(request(golden), never))).text, expected[i], `alone: "${golden.prompt}"`)
  }
  const together = await Promise.all(goldens.map(g => collect(backend.generate(request(g), never))))
  together.forEach((r, i) => t.equal(r.text, expected[i], `together: "${goldens[i].prompt}"`))
  t.not(expected[0], goldens[0].completion_text.slice(0, expected[0].length), 'the int4 file really differs from the float reference (so the comparison means something)')
})

/** A copy of the fp32 export with its graph changed by `edit`, for the refusals below. */
function editedExport (dir: string, edit: (graph: NonNullable<ReturnType<typeof decodeModel>['graph']>) => void): string {
  for (const file of ['config.json', 'generation_config.json', 'tokenizer.json', 'tokenizer_config.json']) {
    fs.copyFileSync(path.join(STORIES_OPTIMUM, file), path.join(dir, file))
  }
  fs.mkdirSync(path.join(dir, 'onnx'))
  const model = decodeModel(fs.readFileSync(path.join(STORIES_OPTIMUM, 'onnx/model.onnx')))
  edit(model.graph!)
  fs.writeFileSync(path.join(dir, 'onnx/model.onnx'), encodeModel(model))
  return dir
}

t.test('graphs chatd cannot run exactly are refused at load, naming the file and the input or output', async t => {
  const loadError = async (dir: string): Promise<string> => {
    try {
      const session = await DecoderSession.load(readModelDir(dir, 'fp32'), { device: testDevice(), threads: 1 })
      await session.close()
    } catch (err) {
      return (err as Error).message
    }
    return 'loaded'
  }
  const dirs = t.testdir({ branch: {}, renamed: {}, wide: {} })
  // An input chatd would not know how to feed (merged decoders' branch switch).
  const branch = editedExport(path.join(dirs, 'branch'), graph => {
    graph.input!.push({ name: 'use_cache_branch', type: { tensor_type: { elem_type: 9, shape: { dim: [{ dim_value: 1 }] } } } })
  })
  t.match(await loadError(branch), new RegExp(`${path.join(branch, 'onnx/model.onnx')}: graph input use_cache_branch is not one chatd can feed`))
  // Cache outputs under names of no known layout.
  const renamed = editedExport(path.join(dirs, 'renamed'), graph => {
    const rename = (name: string): string => name.replace(/^present\./, 'present_key_values.')
    for (const node of graph.node ?? []) {
      node.input = (node.input ?? []).map(rename)
      node.output = (node.output ?? []).map(rename)
    }
    for (const output of graph.output ?? []) output.name = rename(output.name!)
  })
  t.match(await loadError(renamed), /unknown cache layout: the graph returns neither present\.N\.key\/value .* nor new_key_values/)
  // Logits wider than the config's vocabulary: rows would be read at the wrong offsets.
  const wide = editedExport(path.join(dirs, 'wide'), () => {})
  const config = JSON.parse(fs.readFileSync(path.join(wide, 'config.json'), 'utf8'))
  fs.writeFileSync(path.join(wide, 'config.json'), JSON.stringify({ ...config, vocab_size: 500 }))
  t.match(await loadError(wide), /logits output is 512 wide but config.json says vocab_size 500/)
})

t.test('a graph without position_ids runs its sequences one per run (it derives positions itself)', async t => {
  // The fp32 export with position_ids computed inside the graph from the cache length: the way
  // some exporters write it. Exact for unpadded rows only, so chatd must never pad them.
  const dir = editedExport(t.testdir({}), graph => {
    graph.input = graph.input!.filter(i => i.name !== 'position_ids')
    graph.node!.unshift(
      { op_type: 'Shape', input: ['past_key_values.0.key'], output: ['pos/shape'], name: 'pos/Shape', domain: '', attribute: [] },
      { op_type: 'Gather', input: ['pos/shape', 'pos/two'], output: ['pos/past'], name: 'pos/Gather', domain: '', attribute: [{ name: 'axis', type: 2, i: 0 }] },
      { op_type: 'Shape', input: ['input_ids'], output: ['pos/ids_shape'], name: 'pos/IdsShape', domain: '', attribute: [] },
      { op_type: 'Gather', input: ['pos/ids_shape', 'pos/one'], output: ['pos/seq'], name: 'pos/GatherSeq', domain: '', attribute: [{ name: 'axis', type: 2, i: 0 }] },
      { op_type: 'Add', input: ['pos/past', 'pos/seq'], output: ['pos/end'], name: 'pos/Add', domain: '', attribute: [] },
      { op_type: 'Range', input: ['pos/past', 'pos/end', 'pos/step'], output: ['pos/range'], name: 'pos/Range', domain: '', attribute: [] },
      { op_type: 'Unsqueeze', input: ['pos/range', 'pos/zero_axis'], output: ['position_ids'], name: 'pos/Unsqueeze', domain: '', attribute: [] }
    )
    const scalar = (name: string, value: number) => ({ name, data_type: 7, dims: [], raw_data: new Uint8Array(BigInt64Array.of(BigInt(value)).buffer) })
    graph.initializer!.push(scalar('pos/two', 2), scalar('pos/one', 1), scalar('pos/step', 1),
      { name: 'pos/zero_axis', data_type: 7, dims: [1], raw_data: new Uint8Array(BigInt64Array.of(0n).buffer) })
  })
  const backend = new OnnxBackend({ id: 'no-positions', path: dir, dtype: 'fp32', device: testDevice(), threads: 1 })
  await backend.load()
  t.teardown(() => backend.close())
  const session = await DecoderSession.load(readModelDir(dir, 'fp32'), { device: testDevice(), threads: 1 })
  t.equal(session.takesPaddedRows, false, 'no position_ids: rows are never padded')
  await session.close()
  const request = (golden: Golden): GenerateRequest => ({ ...GREEDY, messages: [{ role: 'user', content: golden.prompt }], maxTokens: golden.generated_ids.length })
  const together = await Promise.all(goldens.map(g => collect(backend.generate(request(g), never))))
  together.forEach((r, i) => t.equal(r.text, goldens[i].completion_text, `together: "${goldens[i].prompt}"`))
})

t.test('a tokenizer with ids past the config\'s vocab_size is refused at load (the model would fail every request using them)', async t => {
  const dir = editedExport(t.testdir({}), () => {})
  const config = JSON.parse(fs.readFileSync(path.join(dir, 'config.json'), 'utf8'))
  fs.writeFileSync(path.join(dir, 'config.json'), JSON.stringify({ ...config, vocab_size: 300 }))
  const backend = new OnnxBackend({ id: 'small-vocab', path: dir, dtype: 'fp32', device: testDevice(), threads: 1 })
  await t.rejects(backend.load())
  t.teardown(() => backend.close())
  t.match(backend.state(), { state: 'unavailable', reason: /tokenizer.json has ids up to 511 but config.json says vocab_size 300/ })
})

t.test('chatd convert\'s onnx-community form is that signature and computes what the other exporter\'s file computes', async t => {
  const dirs = t.testdir({ fp32: {}, q4: {} })
  const out = path.join(dirs, 'fp32')
  convertCheckpoint({ from: STORIES_SOURCE, out, weights: 'fp32', form: 'onnx-community' })
  const ours = await ort.InferenceSession.create(path.join(out, 'onnx/model.onnx'), { intraOpNumThreads: 1 })
  const theirs = await ort.InferenceSession.create(path.join(STORIES_OPTIMUM, 'onnx/model.onnx'), { intraOpNumThreads: 1 })
  t.same([...ours.inputNames].sort(), [...theirs.inputNames].sort(), 'the same inputs (no num_logits_to_keep)')
  t.same([...ours.outputNames].sort(), [...theirs.outputNames].sort(), 'the same outputs (logits, present.N.*)')
  const ids = goldens[0].prompt_ids
  const int64 = (values: number[]): ort.Tensor => new ort.Tensor('int64', BigInt64Array.from(values.map(BigInt)), [1, values.length])
  const feeds: Record<string, ort.Tensor> = { input_ids: int64(ids), attention_mask: int64(ids.map(() => 1)), position_ids: int64(ids.map((_, k) => k)) }
  for (let i = 0; i < 5; i++) {
    for (const kv of ['key', 'value']) feeds[`past_key_values.${i}.${kv}`] = new ort.Tensor('float32', new Float32Array(0), [1, 4, 0, 8])
  }
  const a = (await ours.run(feeds)).logits
  const b = (await theirs.run(feeds)).logits
  t.same(a.dims, [1, ids.length, 512], 'logits for every position')
  let worst = 0
  for (let i = 0; i < a.data.length; i++) worst = Math.max(worst, Math.abs((a.data as Float32Array)[i] - (b.data as Float32Array)[i]))
  t.ok(worst < 1e-4, `max |ours - theirs| = ${worst.toExponential(2)}`)
  await ours.release()
  await theirs.release()
  const q4 = path.join(dirs, 'q4')
  convertCheckpoint({ from: STORIES_SOURCE, out: q4, weights: 'int4', form: 'onnx-community' })
  t.notOk(fs.readFileSync(path.join(q4, 'onnx/model_q4.onnx')).includes('accuracy_level'), 'int4: MatMulNBits without accuracy_level, as onnx-community q4 files')
})

t.test('a com.microsoft MultiHeadAttention graph: detected, computes what plain attention does, and decodes its sequences one per run', async t => {
  const dirs = t.testdir({ mha: {}, plain: {} })
  // MultiHeadAttention keeps a cache head per query head: a tiny Llama without grouped kv heads.
  const config = JSON.parse(fs.readFileSync(path.join(REPO_ROOT, 'test/fixtures/tiny-llama.config.json'), 'utf8'))
  const configPath = path.join(dirs, 'config.json')
  fs.writeFileSync(configPath, JSON.stringify({ ...config, num_key_value_heads: config.num_attention_heads }))
  convertRandom({ configPath, out: path.join(dirs, 'mha'), weights: 'fp32', seed: 3, attention: 'mha' })
  convertRandom({ configPath, out: path.join(dirs, 'plain'), weights: 'fp32', seed: 3, cache: 'concat' })
  if (testDevice() === 'webgpu') {
    // onnxruntime's WebGPU provider loads the graph but does not implement MultiHeadAttention's
    // key_padding_mask: refused at load, naming the way out, rather than failing every request.
    await t.rejects(DecoderSession.load(readModelDir(path.join(dirs, 'mha'), 'fp32'), { device: 'webgpu', threads: 1 }),
      /model\.onnx: its MultiHeadAttention does not run on WebGPU \(onnxruntime: .*key_padding_mask.*\); serve this model on the CPU \("device": "cpu"/)
    return
  }
  const mha = await DecoderSession.load(readModelDir(path.join(dirs, 'mha'), 'fp32'), { device: testDevice(), threads: 1 })
  const plain = await DecoderSession.load(readModelDir(path.join(dirs, 'plain'), 'fp32'), { device: testDevice(), threads: 1 })
  t.equal(mha.graphStyle, 'mha')
  t.equal(mha.takesPaddedRows, false, 'rows are never padded for it')
  const ids = [256, 72, 101, 108, 108, 111, 44, 32, 119]
  const run = (s: DecoderSession) => s.forward({ batch: 1, inputIds: [ids], attentionMask: [ids.map(() => 1)], positionIds: [ids.map((_, k) => k)], past: s.emptyCache(1), logitsToKeep: 1 })
  const [a, b] = [await run(mha), await run(plain)]
  let worst = 0
  for (let i = 0; i < a.logits.length; i++) worst = Math.max(worst, Math.abs(a.logits[i] - b.logits[i]))
  t.ok(worst < 1e-4, `max |MultiHeadAttention - plain| = ${worst.toExponential(2)}`)
  await mha.close()
  await plain.close()
  // Through the engine: three requests at once each equal their run alone.
  const backend = new OnnxBackend({ id: 'mha', path: path.join(dirs, 'mha'), dtype: 'fp32', device: testDevice(), threads: 1 })
  await backend.load()
  t.teardown(() => backend.close())
  const request = (content: string): GenerateRequest => ({ ...GREEDY, messages: [{ role: 'user', content }], maxTokens: 12 })
  const prompts = ['hello', 'a longer prompt than that', 'x']
  const alone: string[] = []
  for (const p of prompts) alone.push((await collect(backend.generate(request(p), never))).text)
  const together = await Promise.all(prompts.map(p => collect(backend.generate(request(p), never))))
  together.forEach((r, i) => t.equal(r.text, alone[i], `"${prompts[i]}": together as alone`))
})
