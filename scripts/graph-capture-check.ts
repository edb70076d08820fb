// Whether onnxruntime-node lets chatd turn on the WebGPU provider's graph capture
// (record a decode step once, replay it: what would take the ~10 ms of host
// dispatch out of a GPU step, docs/performance.md "On a GPU: WebGPU"). The
// provider reads `ep.webgpuexecutionprovider.enableGraphCapture` when it is
// appended; onnxruntime-node 1.30 lists no such WebGPU option and adds
// sessionOptions.extra's entries after appending the provider, so the setting
// never reaches it. This opens a session both ways the binding allows, in a child
// process with onnxruntime's verbose log, and reports what the provider read.
// Run it again after upgrading onnxruntime-node; it needs a WebGPU adapter
// (lavapipe will do).
//
//   node scripts/graph-capture-check.ts
import { spawnSync } from 'node:child_process'
import { fileURLToPath } from 'node:url'
import ort from 'onnxruntime-node'
import { PROBE_MODEL } from '../src/engine/onnx/device/probe-model.ts'

const KEY = 'ep.webgpuexecutionprovider.enableGraphCapture'

if (process.argv[2] === '--child') {
  ort.env.logLevel = 'verbose'
  const way = process.argv[3]
  const options = way === 'extra'
    ? { executionProviders: ['webgpu'], extra: { [KEY]: '1' } }
    : { executionProviders: [{ name: 'webgpu', enableGraphCapture: '1' }] }
  try {
    await ort.InferenceSession.create(PROBE_MODEL, options as ort.InferenceSession.SessionOptions)
  } catch (err) {
    console.error(`REFUSED: ${(err as Error).message.split('\n')[0]}`)
  }
  process.exit(0)
}

const ways: Record<string, string> = {
  extra: `sessionOptions.extra { '${KEY}': '1' }`,
  option: 'executionProviders [{ name: \'webgpu\', enableGraphCapture: \'1\' }]',
}
let enabled = false
for (const [way, what] of Object.entries(ways)) {
  // onnxruntime writes its log to stderr.
  const child = spawnSync(process.execPath, [fileURLToPath(import.meta.url), '--child', way], { encoding: 'utf8', timeout: 120_000 })
  const log = `${child.stdout}${child.stderr}`
  const read = /WebGPU EP graph capture enable: (\d)/.exec(log)?.[1]
  const refused = /REFUSED: (.*)/.exec(log)?.[1]
  const verdict = refused ? `refused (${refused})` : read === undefined ? 'the provider did not start (no WebGPU adapter?)' : read === '1' ? 'ON' : 'off'
  if (read === '1') enabled = true
  console.log(`${what}: graph capture ${verdict}`)
}
console.log(enabled ? 'graph capture can be turned on from Node: the step can be captured (see docs/performance.md)' : `graph capture cannot be turned on from onnxruntime-node ${ort.env.versions.common}`)
