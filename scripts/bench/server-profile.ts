// Where a chatd server's own time goes beyond onnxruntime's: the real server
// (scripts/bench/chatd-server.ts) on the benchmark model, run under V8's CPU
// profiler (--cpu-prof: every thread, the engine's worker and the grammar
// workers included), while it answers one stream of --gen tokens (twice) and
// the captured Codex turn (scripts/bench/agent-turns.ts) with nothing cached and
// then cached. Each thread's profile is summed by function and by file (self
// time: a cost spread over many small functions shows by its file), and the
// summary names the share of onnxruntime's run (the binding's call), of garbage
// collection, and of everything else, per generated token. scripts/gpu-check.sh
// runs it as its `profile` step on the GPU form; on the CPU it profiles the CPU form.
//
//   npm run bench:profile -- [--device cpu|webgpu] [--model-config FILE] [--gen 256]
//     [--no-agent-turns] [--top 40] [--json FILE]
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { benchModelDir } from '../bench-model.ts'
import { BENCH_MODEL_ID, startChatdServer } from './chatd-server.ts'
import { codex } from './agent-turns.ts'
import { scriptArgs } from '../script-args.ts'

const ROOT = path.resolve(path.dirname(new URL(import.meta.url).pathname), '../..')
const { values } = scriptArgs(import.meta.url, {
  options: {
    device: { type: 'string', default: 'cpu' },
    'model-config': { type: 'string' },
    gen: { type: 'string', default: '256' },
    'agent-turns': { type: 'boolean', default: true },
    json: { type: 'string', default: path.join(ROOT, 'bench-out', 'server-profile.json') },
    top: { type: 'string', default: '40' },
  },
  allowNegative: true,
})
if (values.device !== 'cpu' && values.device !== 'webgpu') throw new Error(`--device takes cpu or webgpu (got ${values.device})`)
const gpu = values.device === 'webgpu'
const config = values['model-config'] && path.resolve(values['model-config'])
const gen = Number(values.gen)
const modelDir = benchModelDir(32, 'chatd', { gpu, config })
const profileDir = fs.mkdtempSync(path.join(os.tmpdir(), 'chatd-profile-'))

const server = await startChatdServer({
  root: ROOT,
  out: path.join(ROOT, 'bench-out'),
  modelDir,
  dtype: 'q4',
  env: { ONNX_DEVICE: values.device, NODE_OPTIONS: `${process.env.NODE_OPTIONS ?? ''} --cpu-prof --cpu-prof-dir=${profileDir}`.trim() },
  name: 'profile',
})
const requests: Array<Record<string, unknown>> = []
for (let round = 0; round < 2; round++) {
  const started = performance.now()
  const gaps: number[] = []
  let first = 0
  let last = 0
  let tokens = 0
  const stream = await server.client.chat.completions.create({
    model: BENCH_MODEL_ID, messages: [{ role: 'user', content: `Tell a long story, number ${round}.` }], max_tokens: gen, temperature: 0, stream: true, stream_options: { include_usage: true },
  })
  for await (const chunk of stream) {
    const now = performance.now()
    if (chunk.choices[0]?.delta?.content) {
      if (first === 0) first = now
      else gaps.push(now - last)
      last = now
    }
    if (chunk.usage) tokens = chunk.usage.completion_tokens
  }
  gaps.sort((a, b) => a - b)
  requests.push({ kind: 'one stream', tokens, ttft_ms: first - started, itl_p50_ms: gaps[gaps.length >> 1], itl_mean_ms: gaps.reduce((a, b) => a + b, 0) / gaps.length })
  console.error(JSON.stringify(requests.at(-1)))
}
if (values['agent-turns']) {
  for (const [name, user] of [['codex, nothing cached', 'Say hi'], ['codex, cached', 'Say hello']] as const) {
    const turn = await codex(server, 'Q', user)
    requests.push({ kind: name, ttft_ms: turn.ttftMs, prompt_tokens: turn.inputTokens, cached_tokens: turn.cachedTokens })
    console.error(JSON.stringify(requests.at(-1)))
  }
}
await server.stop()

interface ProfileNode { id: number; callFrame: { functionName: string; url: string; lineNumber: number }; children?: number[] }
interface Profile { nodes: ProfileNode[]; samples: number[]; timeDeltas: number[]; startTime: number; endTime: number }
/** onnxruntime-node's session.run: its native call's time is the self time of the binding's JavaScript caller. */
const ORT_RUN = /onnxruntime-node\/dist\/backend\.js$/

const threads = fs.readdirSync(profileDir).filter(f => f.endsWith('.cpuprofile')).sort().map(file => {
  const profile = JSON.parse(fs.readFileSync(path.join(profileDir, file), 'utf8')) as Profile
  const byNode = new Map(profile.nodes.map(n => [n.id, n]))
  const self = new Map<string, number>()
  const byFile = new Map<string, number>()
  profile.samples.forEach((id, i) => {
    const frame = byNode.get(id)!.callFrame
    const file = frame.url ? path.relative(ROOT, frame.url.replace(/^file:\/\//, '')) : ''
    const key = `${frame.functionName || '(anonymous)'}${file ? ` ${file}:${frame.lineNumber + 1}` : ''}`
    const ms = profile.timeDeltas[i] / 1000
    self.set(key, (self.get(key) ?? 0) + ms)
    const fileKey = file || frame.functionName || '(native)'
    byFile.set(fileKey, (byFile.get(fileKey) ?? 0) + ms)
  })
  const sum = (test: (key: string) => boolean): number => [...self].filter(([k]) => test(k)).reduce((a, [, ms]) => a + ms, 0)
  const idle = sum(k => k === '(idle)')
  const busy = sum(k => k !== '(idle)')
  const ortRun = sum(k => ORT_RUN.test(k.replace(/:\d+$/, '')) && !k.startsWith('OnnxruntimeSessionHandler'))
  const gc = sum(k => k === '(garbage collector)')
  return {
    file,
    wall_ms: (profile.endTime - profile.startTime) / 1000,
    busy_ms: busy,
    idle_ms: idle,
    onnxruntime_run_ms: ortRun,
    garbage_collector_ms: gc,
    other_ms: busy - ortRun - gc,
    top: [...self].filter(([k]) => k !== '(idle)').sort((a, b) => b[1] - a[1]).slice(0, Number(values.top)).map(([fn, ms]) => ({ fn, ms: Math.round(ms * 10) / 10 })),
    by_file: [...byFile].filter(([k]) => k !== '(idle)').sort((a, b) => b[1] - a[1]).slice(0, Number(values.top)).map(([file, ms]) => ({ file, ms: Math.round(ms * 10) / 10 })),
  }
})
fs.rmSync(profileDir, { recursive: true, force: true })
const generated = requests.reduce((a, r) => a + (typeof r.tokens === 'number' ? r.tokens : 0), 0)
const report = { date: new Date().toISOString(), device: values.device, model: path.basename(modelDir), generated_tokens: generated, requests, threads }
fs.mkdirSync(path.dirname(values.json), { recursive: true })
fs.writeFileSync(values.json, JSON.stringify(report, null, 2) + '\n')
for (const t of threads.filter(t => t.busy_ms > 100)) {
  console.log(`\n${t.file}: busy ${t.busy_ms.toFixed(0)} ms of ${t.wall_ms.toFixed(0)}; onnxruntime's run ${t.onnxruntime_run_ms.toFixed(0)} ms, garbage collector ${t.garbage_collector_ms.toFixed(0)} ms, the rest ${t.other_ms.toFixed(0)} ms`)
  for (const { fn, ms } of t.top.slice(0, 15)) console.log(`  ${ms.toFixed(1).padStart(9)}  ${fn}`)
  console.log('  by file:')
  for (const { file, ms } of t.by_file.slice(0, 10)) console.log(`  ${ms.toFixed(1).padStart(9)}  ${file}`)
}
console.log(`\nwrote ${path.relative(process.cwd(), values.json)}`)
