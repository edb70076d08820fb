// chatd convert: the directory it writes, its options, and its errors.
import fs from 'node:fs'
import path from 'node:path'
import t from 'tap'
import { ConvertUsageError, runConvert } from '../../../src/engine/onnx/convert/cli.ts'
import { DecoderSession } from '../../../src/engine/onnx/decoder-session.ts'
import { readModelDir } from '../../../src/engine/onnx/model-dir.ts'
import { loadTokenizer } from '../../../src/engine/onnx/tokenizer.ts'
import { REPO_ROOT, STORIES_SOURCE } from '../../helpers/models.ts'

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
  const session = await DecoderSession.load(model, { device: 'cpu', threads: 1 })
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
    const session = await DecoderSession.load(readModelDir(out, 'fp32'), { device: 'cpu', threads: 1 })
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
