// Messages between the OnnxBackend (main thread) and the engine worker.
import type { MessagePort } from 'node:worker_threads'
import type { ChatMessage, DeltaLogprobs, FinishReason, GenerateRequest, Usage } from '../backend.ts'
import type { ErrorCode } from '../../errors.ts'
import type { DeviceChoice } from './ort.ts'
import type { ModelDtype } from './model-dir.ts'
import type { SharedPrefix } from './shared-prefix.ts'

export interface WorkerSettings {
  modelDir: string
  dtype: ModelDtype
  device: DeviceChoice
  /** Who asked for the device, for its errors: a models.json entry; absent: ONNX_DEVICE. */
  deviceFrom?: string
  threads: number
  /** Sequences decoding together (continuous batching); default DEFAULT_SCHEDULER.maxBatch. */
  maxBatch?: number
  /** Prompt tokens per run while others decode; default DEFAULT_SCHEDULER.prefillChunk. */
  prefillChunk?: number
  /** models.json `contextLength`: lowers the model's own. */
  contextLength?: number
  /** KV cache budget in bytes; 0 or absent: derived from the machine's memory. */
  kvCacheBytes?: number
  /** PREFIX_CACHE; default true. */
  prefixCache?: boolean
  /** PREFIX_CACHE_SHARED_PREFIX, placed as the model takes a system prompt; none when absent. */
  sharedPrefix?: SharedPrefix
  /** MIXED_BATCHES; default true. */
  mixedBatches?: boolean
  /** PROMPT_GRAPH; default true. */
  promptGraph?: boolean
}

export type ToWorker =
  | { type: 'generate'; id: string; request: GenerateRequest }
  | { type: 'cancel'; id: string }
  /** A finished reply's conversation, as the next turn will start: compute it ahead when idle, for `cacheScope` alone. */
  | { type: 'next_turn'; messages: ChatMessage[]; cacheScope?: string }
  /** The port to a scope's (new) serving grammar worker. */
  | { type: 'grammar_port'; port: MessagePort; scope: string }
  | { type: 'close' }

export type FromWorker =
  | { type: 'ready'; contextLength: number; device: 'cpu' | 'cuda'; promptGraph: boolean; toolFormat: 'r1' | 'json' }
  | { type: 'load_error'; message: string }
  | { type: 'delta'; id: string; content: string; reasoning: string; logprobs?: DeltaLogprobs }
  | { type: 'finish'; id: string; reason: FinishReason; usage: Usage; stopSequence?: string }
  /** Prompt positions computed ahead for a conversation's next turn. */
  | { type: 'ahead'; positions: number }
  | { type: 'error'; id: string; code: ErrorCode; message: string; param: string | null }
  | { type: 'closed' }
