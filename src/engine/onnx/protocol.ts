// Messages between the OnnxBackend (main thread) and the engine worker.
import type { MessagePort } from 'node:worker_threads'
import type { ChatMessage, DeltaLogprobs, EngineStats, FinishReason, GenerateRequest, GenerateTimings, Usage } from '../backend.ts'
import type { ErrorCode } from '../../errors.ts'
import type { Device } from './device/providers.ts'
import type { EngineSettings } from './scheduler/engine.ts'

/** The worker builds its engine from exactly the engine's settings (a structured clone of them). */
export type WorkerSettings = EngineSettings

export type ToWorker =
  | { type: 'generate'; id: string; request: GenerateRequest }
  | { type: 'cancel'; id: string }
  /** A finished reply's conversation, as the next turn will start: compute it ahead when idle, for `cacheScope` alone. */
  | { type: 'next_turn'; messages: ChatMessage[]; cacheScope?: string }
  /** The port to a scope's (new) serving grammar worker. */
  | { type: 'grammar_port'; port: MessagePort; scope: string }
  | { type: 'close' }

export type FromWorker =
  | { type: 'ready'; contextLength: number; charsPerToken?: number; device: Device; deviceWhy: string; cacheOnDevice: boolean; promptGraph: boolean; capturePositions: number; captureRows: number; toolFormat: 'r1' | 'json' }
  | { type: 'load_error'; message: string }
  | { type: 'delta'; id: string; content: string; reasoning: string; logprobs?: DeltaLogprobs }
  | { type: 'finish'; id: string; reason: FinishReason; usage: Usage; stopSequence?: string; timings?: GenerateTimings }
  /** Prompt positions computed ahead for a conversation's next turn. */
  | { type: 'ahead'; positions: number }
  /** The engine's counts and load (engine-stats.ts), with the tokens of each step since the last report. */
  | { type: 'stats'; stats: EngineStats; steps: number[] }
  | { type: 'error'; id: string; code: ErrorCode; message: string; param: string | null }
  | { type: 'closed' }
