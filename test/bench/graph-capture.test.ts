// scripts/bench/graph-capture.ts, the measurement of the WebGPU provider's graph
// capture through onnxruntime-web over Dawn's Node binding, run as scripts/gpu-check.sh
// runs it, on the tiny random model and the tests' WebGPU adapter (lavapipe in CI),
// two rows decoding together, each on a prompt of its own:
// chatd's step today (onnxruntime-node, the cache in place) and onnxruntime-web's
// decode step without capture and with it (recorded once, replayed every step, its
// inputs written into fixed GPU buffers), and onnxruntime's native provider capturing
// the same step through its C API (koffi), each give the CPU provider's greedy
// tokens, row by row and step after step, and the report says so. Lavapipe's times are the CPU's
// and say nothing about a GPU's; only that every part runs and stays exact.
import { spawnSync } from 'node:child_process'
import fs from 'node:fs'
import path from 'node:path'
import t from 'tap'
import type { GraphCaptureReport } from '../../scripts/bench/graph-capture.ts'
import { REPO_ROOT } from '../helpers/models.ts'
import { needWebgpu } from '../helpers/webgpu.ts'

t.test('graph capture from Node: the CPU\'s tokens with and without it, and the report', async t => {
  if (!await needWebgpu(t)) return
  const dir = t.testdir({})
  const json = path.join(dir, 'report.json')
  const gen = 32
  const res = spawnSync(process.execPath, [
    path.join(REPO_ROOT, 'scripts/bench/graph-capture.ts'),
    '--model-config', path.join(REPO_ROOT, 'test/fixtures/tiny-qwen2-hd16.config.json'),
    '--work', dir, '--rows', '2', '--gen', String(gen), '--max-len', '96', '--profile-steps', '8', '--json', json,
    '--variants', 'node,plain,capture,native',
  ], { encoding: 'utf8', env: { ...process.env, LP_NUM_THREADS: process.env.LP_NUM_THREADS ?? '0' }, timeout: 300_000 })
  t.equal(res.status, 0, res.stderr.slice(-2000))
  const report = JSON.parse(fs.readFileSync(json, 'utf8')) as GraphCaptureReport
  t.equal(report.rows, 2)
  t.same(report.cpu_tokens.map(row => row.length), [gen, gen], 'each row\'s tokens, on a prompt of its own')
  t.not(JSON.stringify(report.cpu_tokens[0]), JSON.stringify(report.cpu_tokens[1]), 'rows that differ (a row reading another\'s cache would show)')
  t.same(report.variants.map(v => [v.kind, v.capture]), [['node', false], ['plain', false], ['capture', true], ['native', true]], 'chatd\'s step today, onnxruntime-web without and with capture, and the native provider with capture')
  for (const v of report.variants) {
    t.same(v.tokens, report.cpu_tokens, `${v.name}: the CPU provider's ${gen} greedy tokens, each row`)
    t.ok(v.tokens_equal_cpu)
    t.ok(v.first_logits_max_diff_vs_cpu < 1e-4, `${v.name}: the first step's logits within ${v.first_logits_max_diff_vs_cpu.toExponential(1)} of the CPU's`)
    t.ok(v.step_ms_median > 0 && v.run_ms_median > 0 && v.tokens_per_s > 0 && v.adapter.length > 0)
  }
  // chatd's step profiled: 8 more steps on a session of their own, node by node and program by program.
  const profile = report.variants.find(v => v.kind === 'node')?.kernel_profile
  t.equal(profile?.steps, 8, 'chatd\'s step: 8 more steps profiled')
  t.ok(profile && profile.nodes > 0 && profile.host_ms > 0 && profile.run_ms >= profile.host_ms, 'each node\'s host time, within the run\'s')
  t.ok(profile?.host_by_op.some(l => l.what === 'MatMulNBitsMlp' && l.per_step === 2), 'by operator: the fused MLP, one a layer')
  t.ok(profile && profile.dispatches > 0 && profile.gpu_ms > 0, 'and the GPU programs it dispatched, timed (lavapipe has timestamp queries)')
  t.notOk(report.variants.some(v => v.kind !== 'node' && v.kernel_profile), 'onnxruntime-web\'s variants are not profiled')
  t.match(res.stdout, /profile of 8 steps: run [\d.]+ ms, nodes' host time [\d.]+ ms/)
  t.ok(report.capture_speedup !== null && report.capture_speedup > 0)
  t.ok(report.capture_speedup_vs_node !== null && report.capture_speedup_vs_node > 0)
  t.match(res.stdout, /graph capture: [\d.]+x the step without it/)
  // The native provider says each time a run replays its recorded step instead of dispatching it.
  const replays = res.stderr.match(/Replaying the captured WebGpuExecutionProvider graph/g)?.length ?? 0
  t.ok(replays >= gen - 2, `the native step: ${replays} of ${gen} runs replayed the captured graph`)
  const native = report.variants.find(v => v.kind === 'native')
  t.ok(native?.first_cache_delta_max_diff_vs_cpu !== undefined && native.first_cache_delta_max_diff_vs_cpu < 1e-4, `the native step's new keys and values, read back for the host's copy: within ${native?.first_cache_delta_max_diff_vs_cpu?.toExponential(1)} of the CPU's`)
  t.ok(report.native_speedup_vs_node !== null && report.native_speedup_vs_node > 0)
  t.match(res.stdout, /native graph capture: [\d.]+x onnxruntime-node's step/)
})
