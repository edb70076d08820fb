// chatd convert: the directory it writes, its options, and its errors.
import fs from 'node:fs'
import path from 'node:path'
import t from 'tap'
import { ConvertUsageError, runConvert } from '../../../src/convert/cli.ts'
import { convertRandom } from '../../../src/convert/index.ts'
import { decodeModel } from '../../../src/convert/onnx-proto.ts'
import { ort } from '../../../src/engine/onnx/device/ort.ts'
import { DecoderSession } from '../../../src/engine/onnx/device/decoder-session.ts'
import { readModelDir } from '../../../src/engine/onnx/model-dir.ts'
import { loadTokenizer } from '../../../src/engine/onnx/text/tokenizer.ts'
import { REPO_ROOT, STORIES_SOURCE } from '../../helpers/models.ts'
import { testDevice } from '../../helpers/webgpu.ts'

const TINY = path.join(REPO_ROOT, 'test/fixtures/tiny-llama.config.json')

t.test('--random writes an onnx-community layout with a byte-level tokenizer', async t => {
  const out = path.join(t.testdir({}), 'model')
  const result = runConvert(['--random', TINY, '--out', out, '--dtype', 'fp16', '--seed', '3'])
  t.equal(result.onnxFile, path.join(out, 'onnx', 'model_fp16.onnx'))
  for (const f of ['config.json', 'generation_config.json', 'tokenizer.json', 'tokenizer_config.json', 'onnx/model_fp16.onnx', 'onnx/model_fp16.onnx_data']) {
    t.ok(fs.existsSync(path.join(out, f)), f)
  }
  t.notOk(fs.readdirSync(path.join(out, 'onnx')).some(f => f.endsWith('.partial')), 'no partial files left')
  const tokenizer = await loadTokenizer(out)
  for (const text of ['Hello, world!', 'café 日本 🚀', '']) {
    t.equal(tokenizer.decode(tokenizer.encode(text, { addSpecialTokens: false })), text, `byte tokenizer round-trips ${JSON.stringify(text)}`)
  }
  const model = readModelDir(out, 'fp16')
  t.same(model.eosTokenIds, [257])
  const session = await DecoderSession.load(model, { device: testDevice(), threads: 1 })
  t.equal(session.cacheType, 'float16')
  t.equal(session.cacheOutputs, 'append', 'by default the graph returns only the new cache positions')
  await session.close()
})

t.test('--cache concat writes the onnx-community signature; gqa graphs are always concat', async t => {
  const dir = t.testdir({})
  for (const [args, expected] of [
    [['--cache', 'concat'], 'concat'],
    [['--cache', 'append'], 'append'],
    [['--attention', 'gqa'], 'concat'],
  ] as const) {
    const out = path.join(dir, args.join('-'))
    runConvert(['--random', TINY, '--out', out, '--dtype', 'fp32', ...args])
    const session = await DecoderSession.load(readModelDir(out, 'fp32'), { device: testDevice(), threads: 1 })
    t.equal(session.cacheOutputs, expected, `${args.join(' ')}: ${expected}`)
    await session.close()
  }
  t.throws(() => runConvert(['--random', TINY, '--out', path.join(dir, 'x'), '--cache', 'ring']), /--cache must be append or concat/)
  t.throws(() => runConvert(['--random', TINY, '--out', path.join(dir, 'y'), '--attention', 'gqa', '--cache', 'append']), /--attention gqa .* --cache concat only/)
})

t.test('the same seed gives the same weights; another seed does not', async t => {
  const dir = t.testdir({})
  const build = (name: string, seed: string) => {
    runConvert(['--random', TINY, '--out', path.join(dir, name), '--dtype', 'fp32', '--seed', seed])
    return fs.readFileSync(path.join(dir, name, 'onnx', 'model.onnx_data'))
  }
  const a = build('a', '1')
  t.ok(a.equals(build('b', '1')), 'seed 1 twice: identical bytes')
  t.notOk(a.equals(build('c', '2')), 'seed 2 differs')
})

t.test('--tokenizer copies a real tokenizer next to random weights', async t => {
  const out = path.join(t.testdir({}), 'model')
  const stories = JSON.parse(fs.readFileSync(path.join(STORIES_SOURCE, 'config.json'), 'utf8'))
  const config = path.join(t.testdirName, 'config.json')
  fs.writeFileSync(config, JSON.stringify({ ...stories, num_hidden_layers: 1 }))
  runConvert(['--random', config, '--out', out, '--tokenizer', STORIES_SOURCE, '--dtype', 'int4'])
  t.same(readModelDir(out, 'q4').eosTokenIds, [2, 1], 'eos ids from the tokenizer directory\'s generation_config.json')
  t.equal(fs.readFileSync(path.join(out, 'tokenizer.json'), 'utf8'), fs.readFileSync(path.join(STORIES_SOURCE, 'tokenizer.json'), 'utf8'))
})

t.test('--from converts a checkpoint and keeps its generation config', async t => {
  const out = path.join(t.testdir({}), 'stories')
  runConvert(['--from', STORIES_SOURCE, '--out', out, '--dtype', 'fp32'])
  // Converting again over an existing directory (read-only sources copied in) works.
  runConvert(['--from', STORIES_SOURCE, '--out', out, '--dtype', 'int4'])
  const model = readModelDir(out, 'fp32')
  t.same(model.eosTokenIds, [2, 1])
  t.equal(model.contextLength, 512)
  t.ok(fs.existsSync(path.join(out, 'onnx', 'model_q4.onnx')))
})

t.test('bad arguments and bad checkpoints are reported clearly', async t => {
  const dir = t.testdir({ broken: { 'config.json': JSON.stringify({ model_type: 'gpt2' }) } })
  try {
    runConvert(['--out', 'x'])
    t.fail('should throw')
  } catch (err) {
    t.ok(err instanceof ConvertUsageError, 'a usage error')
  }
  t.throws(() => runConvert(['--random', TINY, '--from', STORIES_SOURCE, '--out', 'x']), /exactly one of/)
  t.throws(() => runConvert(['--random', TINY, '--out', 'x', '--dtype', 'int3']), /--dtype must be one of/)
  t.throws(() => runConvert(['--random', TINY, '--out', 'x', '--seed', '-1']), /--seed/)
  t.throws(() => runConvert(['--random', TINY, '--out', 'x', '--block-size', '48']), /--block-size must be one of 16, 32, 64, 128, 256/)
  t.throws(() => runConvert(['--random', TINY, '--out', 'x', '--dtype', 'fp32', '--block-size', '128']), /--block-size applies to --dtype int4 only/)
  t.throws(() => runConvert(['--random', TINY, '--out', 'x', '--int4-compute', 'double']), /--int4-compute must be int8 or float \(got double\)/)
  t.throws(() => runConvert(['--random', TINY, '--out', 'x', '--dtype', 'fp32', '--int4-compute', 'float']), /--int4-compute applies to --dtype int4 only/)
  t.throws(() => runConvert(['--from', path.join(dir, 'broken'), '--out', path.join(dir, 'o')]), /model_type "gpt2" is not supported/)
  t.throws(() => runConvert(['--from', path.join(dir, 'absent'), '--out', path.join(dir, 'o')]), /config\.json: cannot be read/)
  // A checkpoint whose tensors disagree with its config.
  const mismatched = path.join(dir, 'mismatched')
  fs.cpSync(STORIES_SOURCE, mismatched, { recursive: true })
  fs.chmodSync(path.join(mismatched, 'config.json'), 0o644)
  const cfg = JSON.parse(fs.readFileSync(path.join(mismatched, 'config.json'), 'utf8'))
  fs.writeFileSync(path.join(mismatched, 'config.json'), JSON.stringify({ ...cfg, intermediate_size: 100 }))
  t.throws(() => runConvert(['--from', mismatched, '--out', path.join(dir, 'o2')]), /gate_proj\.weight has shape \[172,64\], config\.json implies \[100,64\]/)
})

t.test('a tokenizer larger than the config\'s vocab_size is refused before anything is written', async t => {
  const dir = t.testdir({})
  // --random with a real tokenizer (stories260k: 512 tokens) and a config of 300.
  const out = path.join(dir, 'random')
  t.throws(() => runConvert(['--random', TINY, '--out', out, '--tokenizer', STORIES_SOURCE]),
    { message: new RegExp(`tokenizer\\.json has 512 tokens \\(ids 0 to 511\\), more than the vocab_size 300 of ${TINY.replaceAll('.', '\\.')}`) })
  t.notOk(fs.existsSync(out), 'nothing written')

  // --from a checkpoint whose tokenizer gained a token the model has no row for.
  const grown = path.join(dir, 'grown')
  fs.cpSync(STORIES_SOURCE, grown, { recursive: true })
  fs.chmodSync(path.join(grown, 'tokenizer.json'), 0o644)
  const tokenizer = JSON.parse(fs.readFileSync(path.join(grown, 'tokenizer.json'), 'utf8'))
  tokenizer.added_tokens.push({ id: 512, content: '<extra>', single_word: false, lstrip: false, rstrip: false, normalized: false, special: true })
  fs.writeFileSync(path.join(grown, 'tokenizer.json'), JSON.stringify(tokenizer))
  const out2 = path.join(dir, 'from')
  t.throws(() => runConvert(['--from', grown, '--out', out2]), { message: /tokenizer\.json has 513 tokens \(ids 0 to 512\), more than the vocab_size 512 of .*config\.json/ })
  t.notOk(fs.existsSync(out2), 'nothing written')

  // A generated byte-level tokenizer is checked the same way.
  const small = path.join(dir, 'small.config.json')
  fs.writeFileSync(small, JSON.stringify({ ...JSON.parse(fs.readFileSync(TINY, 'utf8')), vocab_size: 100 }))
  t.throws(() => runConvert(['--random', small, '--out', path.join(dir, 'small')]), /vocab_size 100 is smaller than the generated tokenizer/)
  t.notOk(fs.existsSync(path.join(dir, 'small')), 'nothing written')
})

t.test('--attention gqa with a head size that is not a multiple of 16 is refused, naming it', async t => {
  const dir = t.testdir({})
  // tiny-qwen2: hidden_size 64 / 8 heads = head_dim 8.
  const qwen = path.join(REPO_ROOT, 'test/fixtures/tiny-qwen2.config.json')
  const out = path.join(dir, 'qwen-gqa')
  t.throws(() => runConvert(['--random', qwen, '--out', out, '--attention', 'gqa', '--dtype', 'fp32']),
    { message: /--attention gqa needs a head size that is a multiple of 16 .* gives head_dim 8; use --attention standard/ })
  t.notOk(fs.existsSync(out), 'nothing written')
  const odd = path.join(dir, 'odd.config.json')
  fs.writeFileSync(odd, JSON.stringify({ ...JSON.parse(fs.readFileSync(TINY, 'utf8')), hidden_size: 96, head_dim: 24 }))
  t.throws(() => runConvert(['--random', odd, '--out', path.join(dir, 'odd'), '--attention', 'gqa']), /head_dim 24/)
  // head_dim 16 (tiny-llama) converts.
  t.doesNotThrow(() => runConvert(['--random', TINY, '--out', path.join(dir, 'llama-gqa'), '--attention', 'gqa', '--dtype', 'fp32']))
})

t.test('--int4-compute float writes MatMulNBits without accuracy_level; concat graphs return cache_delta beside the whole cache', async t => {
  const dir = t.testdir({})
  const graphOf = (out: string) => decodeModel(fs.readFileSync(path.join(out, 'onnx', 'model_q4.onnx'))).graph!
  const levels = (out: string) => graphOf(out).node.filter(n => n.op_type === 'MatMulNBits').map(n => n.attribute?.find(a => a.name === 'accuracy_level')?.i ?? 'none')
  const meta = (out: string) => Object.fromEntries((decodeModel(fs.readFileSync(path.join(out, 'onnx', 'model_q4.onnx'))).metadata_props ?? []).map(p => [p.key, p.value]))

  const cpu = path.join(dir, 'cpu')
  runConvert(['--random', TINY, '--out', cpu, '--cache', 'concat'])
  t.ok(levels(cpu).length > 0 && levels(cpu).every(l => Number(l) === 4), 'the default: int8 activations (accuracy_level 4)')
  t.equal(meta(cpu)['chatd.int4_compute'], 'int8')
  const gpu = path.join(dir, 'gpu')
  runConvert(['--random', TINY, '--out', gpu, '--cache', 'concat', '--int4-compute', 'float'])
  t.ok(levels(gpu).length > 0 && levels(gpu).every(l => l === 'none'), 'float: no accuracy_level anywhere')
  t.equal(meta(gpu)['chatd.int4_compute'], 'float')

  const cfg = JSON.parse(fs.readFileSync(TINY, 'utf8'))
  const outputs = graphOf(gpu).output.map(o => o.name)
  t.ok(outputs.includes('present.0.key') && outputs.includes('cache_delta'), 'present.N.* and cache_delta')
  const delta = graphOf(gpu).output.find(o => o.name === 'cache_delta')!
  t.same(delta.type?.tensor_type?.shape?.dim?.map(d => d.dim_value ?? d.dim_param), [2 * cfg.num_hidden_layers, 'batch_size', cfg.num_key_value_heads, 'sequence_length', cfg.hidden_size / cfg.num_attention_heads])

  // The delta holds exactly what each present gained: one run from an empty cache, then one token more.
  const session = await ort.InferenceSession.create(path.join(gpu, 'onnx', 'model_q4.onnx'))
  t.teardown(() => session.release())
  const hd = cfg.hidden_size / cfg.num_attention_heads
  const int64 = (values: number[], dims: number[]) => new ort.Tensor('int64', BigInt64Array.from(values, BigInt), dims)
  const run = async (ids: number[], past: Record<string, ort.Tensor>, pastLength: number) => session.run({
    input_ids: int64(ids, [1, ids.length]),
    attention_mask: int64(new Array(pastLength + ids.length).fill(1), [1, pastLength + ids.length]),
    position_ids: int64(ids.map((_, k) => pastLength + k), [1, ids.length]),
    num_logits_to_keep: int64([1], []),
    ...past,
  })
  const empty = Object.fromEntries(Array.from({ length: cfg.num_hidden_layers }, (_, i) => ['key', 'value'].map(kv => [`past_key_values.${i}.${kv}`, new ort.Tensor('float32', new Float32Array(0), [1, cfg.num_key_value_heads, 0, hd])])).flat())
  const first = await run([5, 9, 200], empty, 0)
  const firstDelta = first.cache_delta.data as Float32Array
  const each = cfg.num_key_value_heads * 3 * hd
  for (let i = 0; i < cfg.num_hidden_layers; i++) {
    t.same(firstDelta.subarray(2 * i * each, (2 * i + 1) * each), first[`present.${i}.key`].data, `layer ${i}: the keys of a first run are its whole present`)
    t.same(firstDelta.subarray((2 * i + 1) * each, (2 * i + 2) * each), first[`present.${i}.value`].data, `layer ${i}: and its values`)
  }
  const past = Object.fromEntries(Array.from({ length: cfg.num_hidden_layers }, (_, i) => ['key', 'value'].map(kv => [`past_key_values.${i}.${kv}`, first[`present.${i}.${kv}`]])).flat())
  const second = await run([17], past, 3)
  const secondDelta = second.cache_delta.data as Float32Array
  const present = second['present.1.value'].data as Float32Array
  const gained = Array.from({ length: cfg.num_key_value_heads }, (_, h) => Array.from(present.subarray((h * 4 + 3) * hd, (h * 4 + 4) * hd))).flat()
  t.same(Array.from(secondDelta.subarray(3 * cfg.num_key_value_heads * hd, 4 * cfg.num_key_value_heads * hd)), gained, 'a step\'s delta is the position its present gained (layer 1\'s values)')
  const append = path.join(dir, 'append')
  runConvert(['--random', TINY, '--out', append])
  t.notOk(graphOf(append).output.some(o => o.name === 'cache_delta'), 'append graphs return new_key_values.N.* instead')
  const plain = path.join(dir, 'plain')
  convertRandom({ configPath: TINY, out: plain, weights: 'int4', seed: 1, form: 'onnx-community' })
  t.notOk(decodeModel(fs.readFileSync(path.join(plain, 'onnx', 'model_q4.onnx'))).graph!.output.some(o => o.name === 'cache_delta'), 'the onnx-community form has none')
})

t.test('--attention gqa-masked: the GPU form; refused where it cannot apply, and named in the metadata', async t => {
  const dir = t.testdir({})
  const hd16 = path.join(REPO_ROOT, 'test/fixtures/tiny-qwen2-hd16.config.json')
  t.throws(() => runConvert(['--random', hd16, '--out', path.join(dir, 'a'), '--attention', 'gqa-masked', '--cache', 'append']), /--attention gqa-masked .* --cache concat only/)
  t.throws(() => runConvert(['--random', path.join(REPO_ROOT, 'test/fixtures/tiny-qwen2.config.json'), '--out', path.join(dir, 'b'), '--attention', 'gqa-masked']), /--attention gqa-masked needs a head size that is a multiple of 16 .* head_dim 8/)
  t.throws(() => runConvert(['--random', hd16, '--out', path.join(dir, 'c'), '--attention', 'gqa-masked', '--dtype', 'fp16']), /fp32 and int4 weights only/)
  t.notOk(fs.existsSync(path.join(dir, 'a')) || fs.existsSync(path.join(dir, 'b')) || fs.existsSync(path.join(dir, 'c')), 'nothing written')

  const out = path.join(dir, 'gpu')
  runConvert(['--random', hd16, '--out', out, '--attention', 'gqa-masked', '--int4-compute', 'float'])
  const model = decodeModel(fs.readFileSync(path.join(out, 'onnx', 'model_q4.onnx')))
  const meta = Object.fromEntries((model.metadata_props ?? []).map(p => [p.key, p.value]))
  t.equal(meta['chatd.attention'], 'gqa-masked')
  t.equal(meta['chatd.cache'], 'concat', 'the concat cache without asking')
  const ops = model.graph!.node.map(n => n.op_type)
  const cfg = JSON.parse(fs.readFileSync(hd16, 'utf8'))
  t.equal(ops.filter(op => op === 'GroupQueryAttention').length, cfg.num_hidden_layers, 'one GroupQueryAttention a layer')
  t.notOk(ops.includes('Softmax'), 'no attention from plain operators')
  const qkv = model.graph!.node.filter(n => n.op_type === 'MatMulNBits' && n.name!.includes('qkv_proj'))
  t.ok(qkv.length === cfg.num_hidden_layers && qkv.every(n => n.input!.length === 6 && n.input![5].endsWith('.bias')), 'the q/k/v bias inside MatMulNBits')
  t.ok(model.graph!.output.some(o => o.name === 'cache_delta'), 'cache_delta beside present')
  const session = await DecoderSession.load(readModelDir(out, 'q4'), { device: testDevice(), threads: 1 })
  t.teardown(() => session.close())
  t.equal(session.graphStyle, 'gqa-masked')
})

t.test('--for cpu|gpu: the form chatd pull writes for a device, chosen by the head size and the weights', async t => {
  const dir = t.testdir({})
  const hd16 = path.join(REPO_ROOT, 'test/fixtures/tiny-qwen2-hd16.config.json')
  const hd8 = path.join(REPO_ROOT, 'test/fixtures/tiny-qwen2.config.json')
  t.throws(() => runConvert(['--random', hd16, '--out', path.join(dir, 'x'), '--for', 'tpu']), /--for must be cpu or gpu \(got tpu\)/)
  t.throws(() => runConvert(['--random', hd16, '--out', path.join(dir, 'x'), '--for', 'gpu', '--cache', 'append', '--prompt-graph']),
    /--for gpu sets the graph options itself: leave out --cache, --prompt-graph/)
  t.throws(() => runConvert(['--random', path.join(dir, 'absent.json'), '--out', path.join(dir, 'x'), '--for', 'gpu']), /absent\.json: cannot be read/)
  t.notOk(fs.existsSync(path.join(dir, 'x')), 'nothing written')

  const load = async (out: string, dtype: 'q4' | 'fp16' | 'fp32') => {
    const model = decodeModel(fs.readFileSync(readModelDir(out, dtype).onnxPath))
    const session = await DecoderSession.load(readModelDir(out, dtype), { device: testDevice(), threads: 1 })
    const seen = { style: session.graphStyle, cache: session.cacheOutputs, promptGraph: session.hasPromptGraph, accuracyLevel: model.graph!.node.some(n => n.op_type === 'MatMulNBits' && n.attribute!.some(a => a.name === 'accuracy_level')) }
    await session.close()
    return seen
  }
  const convert = (config: string, form: string, dtype: string) => {
    const out = path.join(dir, `${path.basename(config)}-${form}-${dtype}`)
    runConvert(['--random', config, '--out', out, '--for', form, '--dtype', dtype])
    return out
  }
  t.same(await load(convert(hd16, 'gpu', 'int4'), 'q4'), { style: 'gqa-masked', cache: 'concat', promptGraph: false, accuracyLevel: false },
    'gpu, int4, head size 16: GroupQueryAttention under the mask, the concat cache, int4 in float32, no prompt graph')
  t.same(await load(convert(hd8, 'gpu', 'int4'), 'q4'), { style: 'standard', cache: 'concat', promptGraph: false, accuracyLevel: false },
    'gpu, head size 8 (too narrow for GroupQueryAttention): plain attention')
  t.same(await load(convert(hd16, 'gpu', 'fp16'), 'fp16'), { style: 'standard', cache: 'concat', promptGraph: false, accuracyLevel: false }, 'gpu, fp16: plain attention')
  // The prompt graph (int8 activations) is a CPU form: a session on WebGPU leaves it unloaded.
  t.same(await load(convert(hd16, 'cpu', 'int4'), 'q4'), { style: 'standard', cache: 'append', promptGraph: testDevice() === 'cpu', accuracyLevel: true },
    'cpu: int8 activations, the append cache, the int8 prompt graph (loaded on the CPU only)')
  t.same(await load(convert(hd16, 'cpu', 'fp32'), 'fp32'), { style: 'standard', cache: 'append', promptGraph: false, accuracyLevel: false }, 'cpu, fp32: no prompt graph')
})
