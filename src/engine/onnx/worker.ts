// The engine's thread. onnxruntime-node's session.run blocks the thread that
// calls it for the whole step, so inference lives here and the main thread
// stays free to answer requests, health checks and cancellations.
import { parentPort, workerData } from 'node:worker_threads'
import { ApiError } from '../../errors.ts'
import { LocalEngine } from './scheduler/engine.ts'
import type { FromWorker, ToWorker, WorkerSettings } from './protocol.ts'
import { toolFormatForTemplate } from '../tools/format.ts'
import { measureCharsPerToken } from '../chars-per-token.ts'

const port = parentPort
if (!port) throw new Error('engine worker must run in a worker thread')
const send = (message: FromWorker): void => port.postMessage(message)
const settings = workerData as WorkerSettings

try {
  const engine = await LocalEngine.load(settings, {
    delta: (id, text) => send({ type: 'delta', id, ...text }),
    finish: (id, reason, usage, stopSequence, timings) => send({ type: 'finish', id, reason, usage, ...(stopSequence !== undefined ? { stopSequence } : {}), ...(timings ? { timings } : {}) }),
    error: (id, err) => send({ type: 'error', id, code: err.code, message: err.message, param: err.param }),
    computedAhead: positions => send({ type: 'ahead', positions }),
    stats: report => send({ type: 'stats', ...report }),
  })
  port.on('message', (message: ToWorker) => {
    switch (message.type) {
      case 'generate':
        try {
          engine.start(message.request, message.id)
        } catch (err) {
          const apiError = err instanceof ApiError ? err : new ApiError('internal_error', (err as Error).message)
          send({ type: 'error', id: message.id, code: apiError.code, message: apiError.message, param: apiError.param })
        }
        break
      case 'cancel':
        engine.cancel(message.id)
        break
      case 'next_turn':
        engine.prepareNextTurn(message.messages, message.cacheScope)
        break
      case 'grammar_port':
        engine.grammars.setPort(message.port, message.scope)
        break
      case 'close':
        void engine.close().then(() => {
          send({ type: 'closed' })
          port.close()
        })
        break
    }
  })
  send({ type: 'ready', contextLength: engine.contextLength, charsPerToken: measureCharsPerToken(text => engine.tokenizer.encode(text).length), device: engine.session.device, deviceWhy: engine.session.deviceWhy, cacheOnDevice: engine.session.cacheOnDevice, promptGraph: engine.session.hasPromptGraph, capturePositions: engine.capturePositions, captureRows: engine.captureRows, toolFormat: toolFormatForTemplate(engine.template.source).name })
} catch (err) {
  send({ type: 'load_error', message: (err as Error).message })
}
