// The prompt graph: an int8 copy of the decoder (onnx/model_prompt.onnx) that prompt tokens run
// on, while generated tokens run on the main int4 graph. What users of the default model get.
import fs from 'node:fs'
import path from 'node:path'
import t from 'tap'
import { loadConfig } from '../../../src/config.ts'
import { runConvert } from '../../../src/convert/cli.ts'
import { convertCheckpoint } from '../../../src/convert/index.ts'
import { quantizeInt8 } from '../../../src/convert/tensors.ts'
import { DecoderSession } from '../../../src/engine/onnx/device/decoder-session.ts'
import { LocalEngine } from '../../../src/engine/onnx/scheduler/engine.ts'
import { cacheLayoutFor } from '../../../src/engine/onnx/cache/kv-cache.ts'
import { readModelDir } from '../../../src/engine/onnx/model-dir.ts'
import { createOnnx } from '../../../src/engine/registry.ts'
import { REPO_ROOT, STORIES_SOURCE, storiesModelDir, storiesPromptGraphModelDir } from '../../helpers/models.ts'
import { needWebgpu } from '../../helpers/webgpu.ts'

const TINY = path.join(REPO_ROOT, 'test/fixtures/tiny-llama.config.json')
const PROMPT = [1, 403, 411, 281, 300, 260, 286, 270, 373, 266, 330, 263]

/** The last position's logits of one prompt run, on the prompt graph (`prompt`) or the main one. */
async function promptLogits (session: DecoderSession, prompt: boolean, ids = PROMPT): Promise<Float32Array> {
  const layout = cacheLayoutFor(session)
  const out = await layout.run(layout.empty(), [ids], 1, prompt)
  layout.free(out.cache)
  return out.logits
}

const maxAbsDiff = (a: Float32Array, b: Float32Array): number => a.reduce((m, v, i) => Math.max(m, Math.abs(v - b[i])), 0)
const argmax = (a: Float32Array): number => a.indexOf(Math.max(...a))

// The prompt graph is a CPU form (int8 activations on onnxruntime's CPU integer kernels; the WebGPU
// provider fails on it): this file runs on the CPU only, and on WebGPU the main graph does all.
t.test('on WebGPU the prompt graph is left unloaded: the main graph computes the prompt too', async t => {
  if (!await needWebgpu(t)) return
  const model = readModelDir(storiesPromptGraphModelDir(), 'q4')
  const gpu = await DecoderSession.load(model, { device: 'webgpu', threads: 1 })
  t.teardown(() => gpu.close())
  t.notOk(gpu.hasPromptGraph, 'not loaded')
  const cpu = await DecoderSession.load(model, { device: 'cpu', threads: 1, promptGraph: false })
  t.teardown(() => cpu.close())
  // The CPU form's MatMulNBits quantize activations to int8 on the CPU (accuracy_level 4); the
  // WebGPU provider computes them in float: the same next token, not the same logits.
  t.equal(argmax(await promptLogits(gpu, true)), argmax(await promptLogits(cpu, true)), 'the next token is the int4 graph\'s on the CPU')
})

t.test('int8 weights: one scale per output feature, every value within half a step of the weight', async t => {
  const data = Float32Array.from({ length: 6 * 5 }, (_, i) => Math.sin(i * 1.7) * (1 + (i % 5)))
  const q = quantizeInt8({ shape: [6, 5], data })
  t.equal(q.scales.length, 6)
  for (let row = 0; row < 6; row++) {
    for (let col = 0; col < 5; col++) {
      const back = q.values[col * 6 + row] * q.scales[row]
      t.ok(Math.abs(back - data[row * 5 + col]) <= q.scales[row] / 2 + 1e-6, `w[${row}][${col}]`)
    }
    t.ok(q.values.some((v, i) => i % 6 === row && Math.abs(v) === 127), `row ${row}: its largest weight maps to ±127`)
  }
})

t.test('the prompt graph is loaded beside the main graph and computes the prompt; the main graph the rest', async t => {
  const model = readModelDir(storiesPromptGraphModelDir(), 'q4')
  t.equal(path.basename(model.promptOnnxPath ?? ''), 'model_prompt.onnx')
  const session = await DecoderSession.load(model, { device: 'cpu', threads: 1 })
  t.teardown(() => session.close())
  t.ok(session.hasPromptGraph)
  const alone = await DecoderSession.load({ ...model, onnxPath: model.promptOnnxPath as string }, { device: 'cpu', threads: 1 })
  t.teardown(() => alone.close())
  t.same(await promptLogits(session, true), await promptLogits(alone, false), 'prompt runs are the int8 graph\'s')
  const main = await DecoderSession.load(model, { device: 'cpu', threads: 1, promptGraph: false })
  t.teardown(() => main.close())
  t.notOk(main.hasPromptGraph, 'PROMPT_GRAPH=0: not loaded')
  t.same(await promptLogits(session, false), await promptLogits(main, true), 'other runs are the int4 graph\'s')

  // Closer to the unquantized model than int4 is: the prompt, and so the first token, gains.
  const fp32 = await DecoderSession.load(readModelDir(storiesModelDir('fp32'), 'fp32'), { device: 'cpu', threads: 1 })
  t.teardown(() => fp32.close())
  const exact = await promptLogits(fp32, false)
  const int8Error = maxAbsDiff(await promptLogits(session, true), exact)
  const int4Error = maxAbsDiff(await promptLogits(main, false), exact)
  // With VNNI (or AMX) onnxruntime's uint8 x int8 products are exact in int32 and int8 is more than
  // twice as close; on a CPU without it (an AMD EPYC with AVX2 only: int8 1.997, int4 3.150) its
  // AVX2 kernel adds byte products in pairs in 16 bits, and int8 is still the closer of the two.
  const vnni = /\b(avx512_vnni|avx_vnni|amx_int8)\b/.test(cpuFlags())
  t.ok(int8Error < int4Error / (vnni ? 2 : 1), `largest logit error: int8 ${int8Error.toFixed(3)}, int4 ${int4Error.toFixed(3)} (${vnni ? 'VNNI' : 'no VNNI'})`)
  t.equal(argmax(await promptLogits(session, true)), argmax(exact), 'same first token as the unquantized model')
})

t.test('a token\'s result does not depend on what shares its run: rows and chunks of any size agree exactly', async t => {
  const session = await DecoderSession.load(readModelDir(storiesPromptGraphModelDir(), 'q4'), { device: 'cpu', threads: 1 })
  t.teardown(() => session.close())
  const layout = cacheLayoutFor(session)
  const whole = await promptLogits(session, true)
  // The same prompt beside a different one in one run: activations are quantized per token.
  const other = [1, 290, 262, 300, 301, 302, 303, 304, 305, 306, 307, 308]
  const pair = await layout.run(layout.empty(2), [PROMPT, other], 1, true)
  layout.free(pair.cache)
  t.same(pair.logits.subarray(0, whole.length), whole, 'batched with another prompt: the same logits')
  // In chunks of 5 (the last chunk's logits are the prompt's last position's).
  let cache = layout.empty()
  let logits: Float32Array = new Float32Array(0)
  for (let at = 0; at < PROMPT.length; at += 5) {
    const out = await layout.run(cache, [PROMPT.slice(at, at + 5)], 1, true)
    cache = out.cache
    logits = out.logits
  }
  layout.free(cache)
  t.ok(maxAbsDiff(logits, whole) < 1e-4, 'fed in chunks: the same logits (up to attention\'s float rounding)')
  t.equal(argmax(logits), argmax(whole))
})

t.test('the engine runs prompts on the prompt graph, never mixing them with decode steps, and PROMPT_GRAPH=0 turns it off', async t => {
  const dir = storiesPromptGraphModelDir()
  for (const promptGraph of [true, false]) {
    const engine = await LocalEngine.load({ modelDir: dir, dtype: 'q4', device: 'cpu', threads: 1, promptGraph }, {
      delta: () => {}, finish: () => {}, error: (_id, err) => { throw err },
    })
    t.equal(engine.session.hasPromptGraph, promptGraph, `promptGraph ${promptGraph}`)
    await engine.close()
  }
})

t.test('PROMPT_GRAPH reaches the engine worker from the configuration', async t => {
  for (const [setting, loaded] of [['1', true], ['0', false]] as const) {
    const config = loadConfig({ PROMPT_GRAPH: setting, ONNX_THREADS: '1' })
    t.equal(config.promptGraph, loaded)
    const backend = await createOnnx({ id: 'stories', backend: 'onnx', path: storiesPromptGraphModelDir(), dtype: 'q4', device: 'cpu' }, { config, baseDir: '/' })
    await backend.load()
    t.equal((backend as { promptGraph?: boolean }).promptGraph, loaded, `PROMPT_GRAPH=${setting}: the prompt graph is ${loaded ? '' : 'not '}loaded`)
    await backend.close()
  }
  t.throws(() => loadConfig({ PROMPT_GRAPH: 'maybe' }), /PROMPT_GRAPH/)
})

t.test('a prompt graph whose inputs and outputs differ from the main graph\'s is refused, naming it', async t => {
  const dir = path.join(t.testdir({}), 'model')
  fs.cpSync(storiesPromptGraphModelDir(), dir, { recursive: true })
  // A whole-cache graph (present.N.* outputs) in the prompt graph's place.
  const concat = path.join(dir, 'concat')
  runConvert(['--from', STORIES_SOURCE, '--out', concat, '--dtype', 'fp32', '--cache', 'concat'])
  for (const suffix of ['', '_data']) fs.rmSync(path.join(dir, 'onnx', `model_prompt.onnx${suffix}`))
  fs.copyFileSync(path.join(concat, 'onnx', 'model.onnx'), path.join(dir, 'onnx', 'model_prompt.onnx'))
  fs.copyFileSync(path.join(concat, 'onnx', 'model.onnx_data'), path.join(dir, 'onnx', 'model.onnx_data'))
  await t.rejects(DecoderSession.load(readModelDir(dir, 'q4'), { device: 'cpu', threads: 1 }), /model_prompt\.onnx: the prompt graph's inputs and outputs differ/)
  const off = await DecoderSession.load(readModelDir(dir, 'q4'), { device: 'cpu', threads: 1, promptGraph: false })
  t.notOk(off.hasPromptGraph, 'PROMPT_GRAPH=0 still loads the model')
  await off.close()
})

t.test('conversion progress counts both graphs: it rises steadily and reaches its total only at the end', async t => {
  for (const promptGraph of [false, true]) {
    const reports: Array<[number, number]> = []
    convertCheckpoint({ from: STORIES_SOURCE, out: path.join(t.testdir({}), 'model'), weights: 'int4', promptGraph, onProgress: (done, total) => reports.push([done, total]) })
    const total = reports[0][1]
    t.ok(reports.every(([done, of], i) => of === total && (i === 0 || done >= reports[i - 1][0])), `promptGraph ${promptGraph}: never goes back`)
    t.same(reports.at(-1), [total, total])
    t.equal(reports.findIndex(([done]) => done === total), reports.length - 1, 'the total comes with the last tensor read')
    if (promptGraph) t.equal(total, 2 * 47, 'stories260k\'s 47 tensors, once per graph')
  }
})

t.test('chatd convert --prompt-graph writes model_prompt.onnx; refused where it cannot apply', async t => {
  const dir = t.testdir({})
  const out = path.join(dir, 'model')
  const result = runConvert(['--random', TINY, '--out', out, '--prompt-graph'])
  t.equal(result.onnxFile, path.join(out, 'onnx', 'model_q4.onnx'), 'the main graph is still the int4 one')
  for (const f of ['model_prompt.onnx', 'model_prompt.onnx_data']) t.ok(fs.existsSync(path.join(out, 'onnx', f)), f)
  t.notOk(fs.existsSync(path.join(out, 'onnx', 'model_int8.onnx')))
  t.throws(() => runConvert(['--random', TINY, '--out', path.join(dir, 'a'), '--prompt-graph', '--cache', 'concat']), /--prompt-graph goes with .* the append cache/)
  t.throws(() => runConvert(['--random', TINY, '--out', path.join(dir, 'b'), '--prompt-graph', '--attention', 'gqa', '--cache', 'concat']), /--prompt-graph goes with --attention standard/)
  t.throws(() => runConvert(['--random', TINY, '--out', path.join(dir, 'c'), '--prompt-graph', '--dtype', 'fp16']), /--prompt-graph/)
  t.throws(() => runConvert(['--random', TINY, '--out', path.join(dir, 'd'), '--dtype', 'int8', '--cache', 'concat']), /int8 weights are written with standard attention and the append cache only/)
  // --dtype int8 on its own: a model that runs everything on the integer kernels.
  const int8 = runConvert(['--random', TINY, '--out', path.join(dir, 'int8'), '--dtype', 'int8'])
  t.equal(path.basename(int8.onnxFile), 'model_int8.onnx')
  const session = await DecoderSession.load(readModelDir(path.join(dir, 'int8'), 'int8'), { device: 'cpu', threads: 1 })
  t.notOk(session.hasPromptGraph)
  t.equal((await promptLogits(session, false, [1, 2, 3])).length, session.model.vocabSize)
  await session.close()
})

/** The CPU's feature flags (Linux), or nothing elsewhere. */
function cpuFlags (): string {
  try {
    return fs.readFileSync('/proc/cpuinfo', 'utf8').match(/^flags\s*:(.*)$/m)?.[1] ?? ''
  } catch {
    return ''
  }
}
