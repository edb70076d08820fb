// The decoder graph computes the same logits whether a sequence is run with
// its key/value cache one token at a time or recomputed from scratch.
import fs from 'node:fs'
import path from 'node:path'
import t from 'tap'
import { parseDecoderConfig } from '../../../../src/convert/decoder-config.ts'
import { convertRandom, writeOnnx } from '../../../../src/convert/index.ts'
import { dequantizeInt4, quantizeInt4 } from '../../../../src/convert/tensors.ts'
import { RandomWeights } from '../../../../src/convert/weight-sources.ts'
import { DecoderSession } from '../../../../src/engine/onnx/device/decoder-session.ts'
import { cacheLayoutFor } from '../../../../src/engine/onnx/cache/kv-cache.ts'
import { readModelDir } from '../../../../src/engine/onnx/model-dir.ts'
import { DTYPE_OF, randomGpuFormModelDir, randomGqaModelDir, randomModelDir, REPO_ROOT, type RandomKind } from '../../../helpers/models.ts'
import { testDevice } from '../../../helpers/webgpu.ts'

/**
 * Why the GPU form's tests here run on the CPU only: on WebGPU its session keeps the cache in place, in GPU
 * buffers a cache layout makes (cacheInPlace), never the host tensors these tests feed it. The same checks
 * run there through its layout, against the CPU: test/engine/onnx/device/webgpu-exactness.test.ts.
 */
const IN_PLACE_ON_WEBGPU = 'on WebGPU the GPU form takes its cache in place through a layout (webgpu-exactness.test.ts checks it there)'

const TOKENS = [256, 72, 101, 108, 108, 111, 44, 32, 119, 111, 114, 108, 100, 33, 10, 200, 17]

async function load (kind: RandomKind, weights: 'fp32' | 'fp16' | 'int4', cache?: 'append' | 'concat'): Promise<DecoderSession> {
  const model = readModelDir(randomModelDir(kind, weights, 7, cache), DTYPE_OF[weights])
  return DecoderSession.load(model, { device: testDevice(), threads: 1 })
}

/** Last-position logits after feeding `ids` in one pass without a cache. */
async function fullPass (s: DecoderSession, ids: number[]): Promise<Float32Array> {
  const out = await s.forward({
    batch: 1,
    inputIds: [ids],
    attentionMask: [ids.map(() => 1)],
    positionIds: [ids.map((_, k) => k)],
    past: s.emptyCache(1),
    logitsToKeep: 1,
  })
  return out.logits
}

/**
 * TOKENS' first 4 left-padded by 3 beside TOKENS' first 7, in one run from an empty cache; the
 * padded row's logits. `positionIds` as the graph takes them (none for graphs that derive them).
 */
async function paddedShortRow (s: DecoderSession, positionIds: number[][]): Promise<{ logits: Float32Array; short: number[] }> {
  const short = TOKENS.slice(0, 4)
  const pad = 3
  const out = await s.forward({
    batch: 2,
    inputIds: [[...new Array(pad).fill(0), ...short], TOKENS.slice(0, 7)],
    attentionMask: [[...new Array(pad).fill(0), ...short.map(() => 1)], new Array(7).fill(1)],
    positionIds,
    past: s.emptyCache(2),
    logitsToKeep: 1,
  })
  return { logits: out.logits.subarray(0, s.model.vocabSize), short }
}

function maxAbsDiff (a: Float32Array, b: Float32Array): number {
  let max = 0
  for (let i = 0; i < a.length; i++) max = Math.max(max, Math.abs(a[i] - b[i]))
  return max
}

for (const kind of ['llama', 'qwen2'] as const) {
  for (const [weights, tolerance] of [['fp32', 1e-4], ['fp16', 1e-2]] as const) {
    for (const cacheStyle of ['append', 'concat'] as const) {
      t.test(`${kind} ${weights} (${cacheStyle} cache): cached decoding equals full-prefix recomputation`, async t => {
        const s = await load(kind, weights, cacheStyle)
        t.equal(s.cacheType, weights === 'fp16' ? 'float16' : 'float32', 'cache dtype discovered from the graph')
        t.equal(s.cacheOutputs, cacheStyle, 'cache outputs discovered from the graph')
        const layout = cacheLayoutFor(s)
        // Prefill a 5-token prompt, then feed the rest one token at a time.
        const prompt = TOKENS.slice(0, 5)
        let step = await layout.run(layout.empty(), [prompt], 1)
        t.equal(step.logits.length, s.model.vocabSize, 'num_logits_to_keep = 1 returns only the last position')
        let worst = maxAbsDiff(step.logits, await fullPass(s, prompt))
        for (let n = prompt.length; n < TOKENS.length; n++) {
          step = await layout.run(step.cache, [[TOKENS[n]]], 1)
          t.same(step.cache.lengths, [n + 1])
          worst = Math.max(worst, maxAbsDiff(step.logits, await fullPass(s, TOKENS.slice(0, n + 1))))
        }
        t.ok(worst < tolerance, `max |cached - full| = ${worst.toExponential(2)} < ${tolerance}`)
        layout.free(step.cache)
        await s.close()
      })
    }
  }
}

t.test('left padding: a padded row computes the same logits as the unpadded sequence', async t => {
  const s = await load('llama', 'fp32')
  const short = TOKENS.slice(0, 4)
  const long = TOKENS.slice(0, 7)
  const pad = long.length - short.length
  const batched = await s.forward({
    batch: 2,
    inputIds: [[...new Array(pad).fill(0), ...short], long],
    attentionMask: [[...new Array(pad).fill(0), ...short.map(() => 1)], long.map(() => 1)],
    positionIds: [[...new Array(pad).fill(0), ...short.map((_, k) => k)], long.map((_, k) => k)],
    past: s.emptyCache(2),
    logitsToKeep: 1,
  })
  const V = s.model.vocabSize
  t.ok(maxAbsDiff(batched.logits.subarray(0, V), await fullPass(s, short)) < 1e-4, 'padded row matches')
  t.ok(maxAbsDiff(batched.logits.subarray(V, 2 * V), await fullPass(s, long)) < 1e-4, 'full row matches')
  await s.close()
})

for (const blockSize of [32, 128]) {
  t.test(`int4 graph (block ${blockSize}) computes what its dequantized weights compute in float`, async t => {
    // Builds an fp32 model from exactly the weights the int4 model stores, so the
    // only difference left is MatMulNBits' int8 activations (accuracy_level 4).
    const source = randomModelDir('llama', 'int4')
    const cfg = parseDecoderConfig(JSON.parse(fs.readFileSync(path.join(source, 'config.json'), 'utf8')))
    const random = new RandomWeights(cfg, 7, 0.2)
    const dequantized = {
      has: (name: string) => random.has(name),
      get: (name: string) => {
        const w = random.get(name)
        if (/proj\.weight$|lm_head\.weight$/.test(name)) return dequantizeInt4(quantizeInt4(w, blockSize))
        if (name === 'model.embed_tokens.weight') return { shape: w.shape, data: Float32Array.from(new Float16Array(w.data)) }
        return w
      },
    }
    const copyModelFiles = (dir: string): void => {
      for (const f of ['config.json', 'generation_config.json', 'tokenizer.json', 'tokenizer_config.json']) fs.copyFileSync(path.join(source, f), path.join(dir, f))
      fs.mkdirSync(path.join(dir, 'onnx'))
    }
    const floatDir = t.testdir({ float: {}, quant: {} })
    copyModelFiles(path.join(floatDir, 'float'))
    writeOnnx(path.join(floatDir, 'float'), cfg, dequantized, { weights: 'fp32' }, {})
    let quantDir = source
    if (blockSize !== 32) {
      quantDir = path.join(floatDir, 'quant')
      copyModelFiles(quantDir)
      writeOnnx(quantDir, cfg, random, { weights: 'int4', int4BlockSize: blockSize }, {})
    }
    const float = await DecoderSession.load(readModelDir(path.join(floatDir, 'float'), 'fp32'), { device: testDevice(), threads: 1 })
    const quant = await DecoderSession.load(readModelDir(quantDir, 'q4'), { device: testDevice(), threads: 1 })
    const a = await fullPass(float, TOKENS)
    const b = await fullPass(quant, TOKENS)
    t.ok(Math.max(...a) - Math.min(...a) > 0.5, 'logits are not degenerate')
    let dot = 0; let na = 0; let nb = 0
    for (let i = 0; i < a.length; i++) { dot += a[i] * b[i]; na += a[i] * a[i]; nb += b[i] * b[i] }
    const cosine = dot / Math.sqrt(na * nb)
    t.ok(cosine > 0.999, `cosine similarity ${cosine.toFixed(5)} > 0.999`)
    t.equal(argmax(a), argmax(b), 'same greedy token')
    await float.close()
    await quant.close()
  })
}

function argmax (a: Float32Array): number {
  let best = 0
  for (let i = 1; i < a.length; i++) if (a[i] > a[best]) best = i
  return best
}

t.test('GroupQueryAttention graphs: detected, equal to the standard graph alone, wrong with left padding', async t => {
  const gqa = await DecoderSession.load(readModelDir(randomGqaModelDir(), 'fp32'), { device: testDevice(), threads: 1 })
  const std = await load('llama', 'fp32')
  t.equal(gqa.graphStyle, 'gqa')
  t.equal(std.graphStyle, 'standard')
  t.notOk(gqa.hasPositionIds, 'positions come from the mask')
  const worst = maxAbsDiff(await fullPass(gqa, TOKENS), await fullPass(std, TOKENS))
  t.ok(worst < 1e-4, `single sequence: max difference ${worst.toExponential(2)}`)
  // The reason chatd never left-pads such a graph: the padded row comes out wrong.
  const padded = await paddedShortRow(gqa, [[], []])
  const paddedError = maxAbsDiff(padded.logits, await fullPass(std, padded.short))
  t.ok(paddedError > 1e-2, `left-padded row differs by ${paddedError.toFixed(3)}`)
  await gqa.close()
  await std.close()
})

t.test('gqa-masked graphs (the GPU form): detected, equal to the standard graph, exact with left padding, prompt chunks one row a run', { skip: testDevice() === 'webgpu' && IN_PLACE_ON_WEBGPU }, async t => {
  const masked = await DecoderSession.load(readModelDir(randomGpuFormModelDir('fp32'), 'fp32'), { device: testDevice(), threads: 1 })
  const std = await DecoderSession.load(readModelDir(randomGpuFormModelDir('fp32', 'standard'), 'fp32'), { device: testDevice(), threads: 1 })
  t.teardown(async () => { await masked.close(); await std.close() })
  t.equal(masked.graphStyle, 'gqa-masked')
  t.ok(masked.takesPaddedRows, 'rows of different lengths share a run')
  t.notOk(masked.batchesPromptChunks, 'several-token runs on a cached past take one row')
  t.ok(std.batchesPromptChunks)
  const worst = maxAbsDiff(await fullPass(masked, TOKENS), await fullPass(std, TOKENS))
  t.ok(worst < 1e-4, `single sequence: max difference from the standard graph ${worst.toExponential(2)}`)
  // A left-padded row beside a longer one computes what it computes alone.
  const padded = await paddedShortRow(masked, [[0, 0, 0, 0, 1, 2, 3], [0, 1, 2, 3, 4, 5, 6]])
  const paddedError = maxAbsDiff(padded.logits, await fullPass(std, padded.short))
  t.ok(paddedError < 1e-4, `left-padded row: max difference ${paddedError.toExponential(2)}`)
  // The whole cache after a run equals the standard graph's (rotated keys included).
  const five = { batch: 1, inputIds: [TOKENS.slice(0, 5)], attentionMask: [[1, 1, 1, 1, 1]], positionIds: [[0, 1, 2, 3, 4]], logitsToKeep: 1 }
  const out = await masked.forward({ ...five, past: masked.emptyCache(1) })
  const ref = await std.forward({ ...five, past: std.emptyCache(1) })
  let cacheError = 0
  for (const name of Object.keys(ref.present.tensors)) {
    cacheError = Math.max(cacheError, maxAbsDiff(out.present.tensors[name].data as Float32Array, ref.present.tensors[name].data as Float32Array))
  }
  t.ok(cacheError < 1e-5, `every layer's keys and values: max difference ${cacheError.toExponential(2)}`)
  // onnxruntime refuses a several-token run on a past for more than one row (why prompts prefill alone).
  const first = await masked.forward({ batch: 2, inputIds: [[5, 6], [7, 8]], attentionMask: [[1, 1], [1, 1]], positionIds: [[0, 1], [0, 1]], past: masked.emptyCache(2), logitsToKeep: 1 })
  await t.rejects(masked.forward({ batch: 2, inputIds: [[9, 10], [11, 12]], attentionMask: [[1, 1, 1, 1], [1, 1, 1, 1]], positionIds: [[2, 3], [2, 3]], past: first.present, logitsToKeep: 1 }), /batch_size must be 1/)
  DecoderSession.disposeCache(first.present)
})

t.test('the gqa-masked graph without its mask (gqa-causal, written for measuring only): the same for one unpadded row, refused by chatd', { skip: testDevice() === 'webgpu' && IN_PLACE_ON_WEBGPU }, async t => {
  const configPath = path.join(REPO_ROOT, 'test/fixtures', 'tiny-qwen2-hd16.config.json')
  const out = t.testdir({})
  convertRandom({ configPath, out, weights: 'fp32', seed: 7, cache: 'concat', attention: 'gqa-masked', attentionBias: false })
  const onnx = path.join(out, 'onnx', 'model.onnx')
  // chatd never serves it: a padded row would attend to its padding.
  await t.rejects(DecoderSession.load(readModelDir(out, 'fp32'), { device: testDevice(), threads: 1 }), /gqa-causal graph .* is written for measuring only/)
  // On onnxruntime directly, one unpadded row computes what the GPU form computes: the operator is
  // causal by itself, and rotates q and k at the positions its seqlens_k gives (the prompt's from 0,
  // a next token's after the past).
  const { default: ort } = await import('onnxruntime-node')
  const bare = await ort.InferenceSession.create(onnx)
  const masked = await DecoderSession.load(readModelDir(randomGpuFormModelDir('fp32'), 'fp32'), { device: testDevice(), threads: 1 })
  t.teardown(async () => { await bare.release(); await masked.close() })
  type Feeds = Record<string, InstanceType<typeof ort.Tensor>>
  const feedsFor = (ids: number[], start: number, past: Feeds): Feeds => ({
    input_ids: new ort.Tensor('int64', BigInt64Array.from(ids, BigInt), [1, ids.length]),
    attention_mask: new ort.Tensor('int64', new BigInt64Array(start + ids.length).fill(1n), [1, start + ids.length]),
    position_ids: new ort.Tensor('int64', BigInt64Array.from(ids, (_, k) => BigInt(start + k)), [1, ids.length]),
    num_logits_to_keep: new ort.Tensor('int64', BigInt64Array.of(1n), []),
    ...past,
  })
  const empty: Feeds = {}
  for (const name of bare.inputNames.filter(n => n.startsWith('past_key_values.'))) empty[name] = new ort.Tensor('float32', new Float32Array(0), [1, masked.model.numKvHeads, 0, masked.model.headDim])
  const causal = (await bare.run(feedsFor(TOKENS, 0, empty))).logits.data as Float32Array
  const worst = maxAbsDiff(causal, await fullPass(masked, TOKENS))
  t.ok(worst < 1e-5, `one unpadded row: max difference from the GPU form ${worst.toExponential(2)}`)
  // The prompt but its last token, then that token on its cache: the same logits as the whole prompt's.
  const head = await bare.run(feedsFor(TOKENS.slice(0, -1), 0, empty))
  const past: Feeds = {}
  for (const name of Object.keys(empty)) past[name] = head[name.replace('past_key_values', 'present')]
  const stepped = (await bare.run(feedsFor(TOKENS.slice(-1), TOKENS.length - 1, past))).logits.data as Float32Array
  const worstStep = maxAbsDiff(stepped, causal)
  t.ok(worstStep < 1e-4, `a next token on the cache: max difference from the whole prompt's ${worstStep.toExponential(2)}`)
  t.throws(() => convertRandom({ configPath, out: t.testdir({}), weights: 'fp32', seed: 7, attention: 'standard', attentionBias: false }), /only the gqa-masked attention style is written without its bias/)
})

t.test('the static decode step (gqa-static-decode, the decode step graph capture needs, for measuring only): the GPU form\'s tokens at a fixed cache length, refused by chatd', async t => {
  const configPath = path.join(REPO_ROOT, 'test/fixtures', 'tiny-qwen2-hd16.config.json')
  const out = t.testdir({})
  convertRandom({ configPath, out, weights: 'fp32', seed: 7, cache: 'concat', attention: 'gqa-masked', staticDecode: true })
  await t.rejects(DecoderSession.load(readModelDir(out, 'fp32'), { device: testDevice(), threads: 1 }), /gqa-static-decode graph .* is written for measuring only/)
  t.throws(() => convertRandom({ configPath, out: path.join(out, 'standard'), weights: 'fp32', seed: 7, attention: 'standard', staticDecode: true }), /the static decode step is written in the gqa-masked attention style/)
  // On onnxruntime's CPU provider: the prompt on the GPU form, then every decode step on the static
  // graph with a cache and mask MAX positions long (ones up to the new token), each step's present the
  // next step's past, against the GPU form decoding with a growing cache.
  const { default: ort } = await import('onnxruntime-node')
  const form = await ort.InferenceSession.create(path.join(randomGpuFormModelDir('fp32'), 'onnx', 'model.onnx'))
  const fixed = await ort.InferenceSession.create(path.join(out, 'onnx', 'model.onnx'))
  t.teardown(async () => { await form.release(); await fixed.release() })
  t.notOk(fixed.inputNames.includes('num_logits_to_keep'), 'no num_logits_to_keep: one token a run')
  t.ok(fixed.outputNames.includes('cache_delta'), 'cache_delta, as the GPU form returns it')
  const MAX = 32
  const STEPS = 10
  const int64 = (values: number[], dims: number[]) => new ort.Tensor('int64', BigInt64Array.from(values, BigInt), dims)
  const layers = form.inputNames.filter(n => /^past_key_values\.\d+\.key$/.test(n)).length
  const [kvHeads, headDim] = [2, 16]
  let past: Record<string, InstanceType<typeof ort.Tensor>> = {}
  for (let i = 0; i < layers; i++) for (const kv of ['key', 'value']) past[`past_key_values.${i}.${kv}`] = new ort.Tensor('float32', new Float32Array(0), [1, kvHeads, 0, headDim])
  const prompt = await form.run({ input_ids: int64(TOKENS, [1, TOKENS.length]), attention_mask: int64(TOKENS.map(() => 1), [1, TOKENS.length]), position_ids: int64(TOKENS.map((_, k) => k), [1, TOKENS.length]), num_logits_to_keep: int64([1], []), ...past })
  const first = argmax(prompt.logits.data as Float32Array)
  // The growing cache, and the same positions right-padded to MAX.
  let grown: Record<string, InstanceType<typeof ort.Tensor>> = {}
  let padded: Record<string, InstanceType<typeof ort.Tensor>> = {}
  for (let i = 0; i < layers; i++) {
    for (const kv of ['key', 'value']) {
      const present = prompt[`present.${i}.${kv}`]
      grown[`past_key_values.${i}.${kv}`] = present
      const data = new Float32Array(kvHeads * MAX * headDim)
      const src = present.data as Float32Array
      for (let h = 0; h < kvHeads; h++) data.set(src.subarray(h * TOKENS.length * headDim, (h + 1) * TOKENS.length * headDim), h * MAX * headDim)
      padded[`past_key_values.${i}.${kv}`] = new ort.Tensor('float32', data, [1, kvHeads, MAX, headDim])
    }
  }
  past = {}
  const expected: number[] = []
  const got: number[] = []
  let [nextGrown, nextFixed] = [first, first]
  const dims = new Set<string>()
  let deltas = 0
  for (let step = 0; step < STEPS; step++) {
    const position = TOKENS.length + step
    const a = await form.run({ input_ids: int64([nextGrown], [1, 1]), attention_mask: int64(new Array<number>(position + 1).fill(1), [1, position + 1]), position_ids: int64([position], [1, 1]), num_logits_to_keep: int64([1], []), ...grown })
    const b = await fixed.run({ input_ids: int64([nextFixed], [1, 1]), attention_mask: int64(Array.from({ length: MAX }, (_, k) => (k <= position ? 1 : 0)), [1, MAX]), position_ids: int64([position], [1, 1]), ...padded })
    nextGrown = argmax(a.logits.data as Float32Array)
    nextFixed = argmax(b.logits.data as Float32Array)
    expected.push(nextGrown)
    got.push(nextFixed)
    deltas = Math.max(deltas, maxAbsDiff(a.cache_delta.data as Float32Array, b.cache_delta.data as Float32Array))
    t.same(b.cache_delta.dims, a.cache_delta.dims)
    if (step === 0) {
      const worst = maxAbsDiff(a.logits.data as Float32Array, b.logits.data as Float32Array)
      t.ok(worst < 1e-5, `the first step's logits: max difference ${worst.toExponential(2)}`)
    }
    grown = {}
    padded = {}
    for (let i = 0; i < layers; i++) {
      for (const kv of ['key', 'value']) {
        grown[`past_key_values.${i}.${kv}`] = a[`present.${i}.${kv}`]
        dims.add(JSON.stringify(b[`present.${i}.${kv}`].dims))
        padded[`past_key_values.${i}.${kv}`] = b[`present.${i}.${kv}`]
      }
    }
  }
  t.same(got, expected, `${STEPS} greedy tokens`)
  t.ok(deltas < 1e-5, `each step's cache_delta (its new keys and values) the GPU form's: max difference ${deltas.toExponential(2)}`)
  t.same([...dims], [JSON.stringify([1, kvHeads, MAX, headDim])], 'the cache keeps its length')
})
