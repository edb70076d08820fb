// The thread that turns a downloaded checkpoint into chatd's graph and checks
// that the result runs. Converting a 1.5B model takes minutes of CPU; in a
// worker it never blocks the server that started it (auto-pull) or the
// progress bar that shows it (chatd pull).
import { parentPort, workerData } from 'node:worker_threads'
import { join } from 'node:path'
import { convertCheckpoint, readDecoderConfig } from '../convert/index.ts'
import type { WeightFormat } from '../convert/decoder-graph.ts'
import { formOptions, type ModelForm } from '../convert/model-forms.ts'
import { DecoderSession } from '../engine/onnx/device/decoder-session.ts'
import { LocalEngine } from '../engine/onnx/scheduler/engine.ts'
import type { ModelDtype } from '../engine/onnx/model-dir.ts'

export interface ConvertJob {
  from: string
  out: string
  weights: WeightFormat
  dtype: ModelDtype
  /** The form for the device the model will run on (model-forms.ts). */
  form: ModelForm
}

export type ConvertMessage =
  | { type: 'progress'; tensors: number; total: number }
  | { type: 'converted'; seconds: number }
  | { type: 'verified'; seconds: number }
  | { type: 'failed'; message: string }

const port = parentPort
if (!port) throw new Error('the conversion worker must run in a worker thread')
const job = workerData as ConvertJob
const send = (message: ConvertMessage): void => port.postMessage(message)

try {
  let last = 0
  const converted = convertCheckpoint({
    from: job.from,
    out: job.out,
    weights: job.weights,
    ...formOptions(job.form, job.weights, readDecoderConfig(join(job.from, 'config.json')).headDim),
    onProgress: (tensors, total) => {
      // A 28-layer model has ~340 tensors; a message per percent is plenty.
      if (tensors === total || tensors - last >= Math.max(1, Math.floor(total / 100))) {
        last = tensors
        send({ type: 'progress', tensors, total })
      }
    },
  })
  send({ type: 'converted', seconds: converted.seconds })
  send({ type: 'verified', seconds: await verify(job) })
} catch (err) {
  send({ type: 'failed', message: (err as Error).message })
}

/**
 * Loads the new model as the server will (every load-time check: files, graph signature, tokenizer
 * against vocabulary) and runs one prompt through it: the logits must be finite and not flat.
 */
async function verify (job: ConvertJob): Promise<number> {
  const started = performance.now()
  const engine = await LocalEngine.load({ modelDir: job.out, dtype: job.dtype, device: 'cpu', threads: 0 }, {
    delta: () => {}, finish: () => {}, error: () => {},
  })
  try {
    const ids = engine.encodePrompt({ messages: [{ role: 'user', content: 'What is 17 * 23?' }] })
    // Both graphs where there are two: the prompt graph (prompt: true) and the one that generates.
    for (const prompt of engine.session.hasPromptGraph ? [true, false] : [false]) {
      const out = await engine.session.forward({
        batch: 1,
        inputIds: [ids],
        attentionMask: [ids.map(() => 1)],
        positionIds: [ids.map((_, k) => k)],
        past: engine.session.emptyCache(1),
        logitsToKeep: 1,
        prompt,
      })
      const graph = prompt ? 'prompt graph' : 'model'
      let min = Infinity
      let max = -Infinity
      for (const v of out.logits) {
        if (!Number.isFinite(v)) throw new Error(`${job.out}: the converted ${graph} computes non-finite logits`)
        min = Math.min(min, v)
        max = Math.max(max, v)
      }
      if (max - min < 1e-3) throw new Error(`${job.out}: the converted ${graph} computes the same logit for every token`)
      DecoderSession.disposeCache(out.present)
    }
  } finally {
    await engine.close()
  }
  return (performance.now() - started) / 1000
}
