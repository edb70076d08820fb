// Messages of the grammar workers (grammar-worker.ts): with the thread that
// owns them (grammar-service.ts), and with the engine's thread over a port of
// their own (grammar-client.ts).
import type { MessagePort } from 'node:worker_threads'
import type { JsonFormat } from './grammar.ts'
import type { ModelDtype } from '../model-dir.ts'

export interface GrammarWorkerData {
  modelDir: string
  dtype: ModelDtype
  /** A trial worker compiles one schema and is let go; a serving worker keeps grammars and matchers. */
  role: 'trial' | 'serving'
  /** The serving worker's end of the engine's port. */
  port?: MessagePort
}

/** A request's schemas, compiled one after the other in one message (one time limit for them all). */
export type ToGrammarWorker =
  | { type: 'compile'; id: number; items: Array<{ key: string; format: JsonFormat }> }
  /**
   * A serving worker handed to another scope: it drops every grammar and matcher it holds, closes
   * its port to the engine and answers steps over this one from now on.
   */
  | { type: 'rescope'; port: MessagePort }

export type FromGrammarWorker =
  /** The vocabulary is prepared: compiles may start (and be timed). */
  | { type: 'ready' }
  /** Item `index` of message `id` starts compiling (so a time or memory limit can name it). */
  | { type: 'compiling'; id: number; index: number }
  | { type: 'compiled'; id: number; memoryBytes: number }
  /** `index`: the item that failed. */
  | { type: 'failed'; id: number; index: number; message: string; broken: boolean }
  /** Matchers open in the serving worker, after each change. */
  | { type: 'matchers'; open: number; memoryBytes: number }

/** From the engine: take `tokens` (sampled since the last step), then send the next mask. The first step opens the matcher. */
export type ToMatcher =
  | { type: 'step'; seq: number; tokens: number[]; open?: { key: string; format: JsonFormat } }
  | { type: 'close'; seq: number }

export type FromMatcher =
  | { type: 'mask'; seq: number; mask: Int32Array }
  | { type: 'error'; seq: number; message: string }
