// A grammar worker: one xgrammar instance over one model's vocabulary, in a
// thread of its own so a compile that takes seconds, traps or grows memory
// stalls neither the event loop nor the engine, and can be ended by
// terminating the thread (grammar-service.ts). A trial worker compiles one
// schema and is let go; the serving worker keeps compiled grammars and the
// sequences' matchers of one scope (an account), answers the engine's steps
// over its port, and may be handed to another scope, which keeps nothing of
// the last.
import v8 from 'node:v8'
import { parentPort, workerData, type MessagePort } from 'node:worker_threads'
import { ApiError } from '../../../errors.ts'
import { Grammars, type JsonFormat, type LocalConstraint } from './grammar.ts'
import type { FromGrammarWorker, FromMatcher, GrammarWorkerData, ToGrammarWorker, ToMatcher } from './grammar-protocol.ts'
import { readModelDir } from '../model-dir.ts'
import { TokenTable } from '../text/token-bytes.ts'
import { loadTokenizer } from '../text/tokenizer.ts'

const parent = parentPort
if (!parent) throw new Error('the grammar worker must run in a worker thread')
const settings = workerData as GrammarWorkerData
const model = readModelDir(settings.modelDir, settings.dtype)
const tokens = new TokenTable(await loadTokenizer(settings.modelDir))
const grammars = new Grammars(() => ({ bytes: tokens.grammarVocabulary(), vocabSize: model.vocabSize, stopIds: model.eosTokenIds }))
const matchers = new Map<number, Promise<LocalConstraint>>()

/** Bytes outside the JavaScript heap: the WebAssembly memory, which never shrinks. */
const memoryBytes = (): number => v8.getHeapStatistics().external_memory
const send = (message: FromGrammarWorker): void => parent.postMessage(message)
const counted = (): void => send({ type: 'matchers', open: matchers.size, memoryBytes: memoryBytes() })
await grammars.prepare()

/** A trial also checks the grammar's first mask: a schema no JSON value satisfies allows no first token. */
async function compile (item: { key: string; format: JsonFormat }): Promise<void> {
  await grammars.compile(item.format, item.key)
  if (settings.role !== 'trial') return
  const first = await grammars.constraint(item.format, item.key)
  await first.prepare()
  const empty = !(first.mask as Int32Array).some(word => word !== 0)
  first.dispose()
  if (empty) throw new ApiError('invalid_parameter', 'no JSON value satisfies the schema (its grammar allows no first token).', { param: 'response_format' })
}

/** Compiles the items in turn; the first that fails ends the message, naming its index. */
async function compileAll (message: ToGrammarWorker & { type: 'compile' }): Promise<void> {
  for (const [index, item] of message.items.entries()) {
    send({ type: 'compiling', id: message.id, index })
    try {
      await compile(item)
    } catch (err) {
      send({ type: 'failed', id: message.id, index, message: err instanceof ApiError ? err.message : String(err), broken: grammars.broken })
      return
    }
  }
  send({ type: 'compiled', id: message.id, memoryBytes: memoryBytes() })
}

/** The serving worker's port to the engine, the scope's; none in a trial worker. */
let engine: MessagePort | undefined

/** Answers the engine's steps over `port`: each sequence's operations one after the other (a close waits for the step before it). */
function listen (port: MessagePort): void {
  engine = port
  const chains = new Map<number, Promise<void>>()
  const reply = (message: FromMatcher, transfer: ArrayBuffer[] = []): void => port.postMessage(message, transfer)
  const then = (seq: number, op: () => Promise<void>): void => {
    const next = (chains.get(seq) ?? Promise.resolve()).then(op)
    chains.set(seq, next)
    void next.finally(() => { if (chains.get(seq) === next) chains.delete(seq) })
  }
  port.on('message', (message: ToMatcher) => {
    const seq = message.seq
    if (message.type === 'close') {
      then(seq, async () => {
        const matcher = matchers.get(seq)
        matchers.delete(seq)
        await matcher?.then(m => m.dispose(), () => {})
        counted()
      })
      return
    }
    if (!matchers.has(seq) && message.open) {
      const opened = grammars.constraint(message.open.format, message.open.key)
      opened.catch(() => {}) // reported to the step below
      matchers.set(seq, opened)
      counted()
    }
    then(seq, async () => {
      try {
        const matcher = matchers.get(seq)
        if (!matcher) throw new Error('no matcher for this sequence')
        const m = await matcher
        for (const id of message.tokens) if (!m.accept(id)) throw new Error(`the grammar refused token ${id}, which its own mask allowed`)
        await m.prepare()
        const mask = Int32Array.from(m.mask as Int32Array)
        reply({ type: 'mask', seq, mask }, [mask.buffer])
      } catch (err) {
        reply({ type: 'error', seq, message: (err as Error).message })
      }
    })
  })
}

/**
 * Handed to another scope (grammar-service.ts, only when none of the last scope's requests runs):
 * nothing of the last scope stays, neither its grammars (a first use by the new scope is always
 * a compile) nor its matchers (closes that were still on their way), and its port closes.
 */
function rescope (port: MessagePort): void {
  engine?.close()
  for (const matcher of matchers.values()) void matcher.then(m => m.dispose(), () => {})
  matchers.clear()
  grammars.clear()
  listen(port)
  counted()
}

parent.on('message', (message: ToGrammarWorker) => {
  if (message.type === 'rescope') rescope(message.port)
  else void compileAll(message)
})
if (settings.port) listen(settings.port)
send({ type: 'ready' })
