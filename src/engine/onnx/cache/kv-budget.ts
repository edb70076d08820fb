// The key/value cache's memory budget. A sequence reserves, when it is
// admitted, room for everything it may ever cache (its prompt plus max_tokens),
// so a burst of long requests waits in the queue instead of growing the cache
// until the process runs out of memory (llama.cpp's server does the same with
// its fixed slots; vLLM instead admits freely and preempts). Rows that decode
// together are padded to the longest, so a group of rows costs rows x its
// largest reservation.
import os from 'node:os'
import type { ModelDir } from '../model-dir.ts'
import type { CacheType } from '../device/decoder-session.ts'

/** Slots a row's buffer may hold beyond its positions (the append cache grows 64 at a time). */
export const SLOT_SLACK = 64

/** Share of the machine's (or the container's) memory the KV cache gets when KV_CACHE_MB is 0. */
const DEFAULT_SHARE = 0.25

/** Bytes one cached position takes: a key and a value per layer and kv head. */
export function kvBytesPerToken (model: Pick<ModelDir, 'numLayers' | 'numKvHeads' | 'headDim'>, cacheType: CacheType): number {
  return model.numLayers * 2 * model.numKvHeads * model.headDim * (cacheType === 'float16' ? 2 : 4)
}

/** The budget when none is set: a quarter of the memory this process may use (a cgroup limit counts). */
export function defaultKvCacheBytes (): number {
  const limit = process.constrainedMemory()
  const memory = limit > 0 && limit < os.totalmem() ? limit : os.totalmem()
  return Math.floor(memory * DEFAULT_SHARE)
}

/** The least the prefix cache keeps by default (PREFIX_CACHE_MB=0), whatever the model. */
const KEPT_FLOOR_BYTES = 384 * 2 ** 20
/** Full context windows the prefix cache keeps by default: room for a couple of agents' conversations. */
const KEPT_CONTEXTS = 2

/**
 * What finished requests' caches may keep when PREFIX_CACHE_MB is 0: two full context windows of
 * the model (DeepSeek-R1-Distill-Qwen-1.5B: 2 x 16384 positions x 56 KiB = 1.75 GiB, two or three
 * agent conversations), at least 384 MiB.
 */
export function defaultKeptBytes (contextLength: number, bytesPerToken: number): number {
  return Math.max(KEPT_FLOOR_BYTES, KEPT_CONTEXTS * contextLength * bytesPerToken)
}

export class KvBudget {
  readonly bytes: number
  readonly bytesPerToken: number
  /** Cache positions the budget holds in all. */
  readonly tokens: number

  constructor (bytes: number, bytesPerToken: number) {
    this.bytes = bytes
    this.bytesPerToken = bytesPerToken
    this.tokens = Math.floor(bytes / bytesPerToken)
  }

  /** The longest sequence (prompt plus generated tokens) the budget can hold alone. */
  get longestSequence (): number {
    return Math.max(0, this.tokens - SLOT_SLACK)
  }

  /** Positions a sequence reserves: all it may cache, plus its buffer's slack. */
  static reserveOf (promptTokens: number, maxNewTokens: number): number {
    return promptTokens + maxNewTokens + SLOT_SLACK
  }

  /** Whether rows with these reservations fit together, each padded to the largest, beside `kept` positions of cached prefixes. */
  fits (reserves: number[], kept = 0): boolean {
    return (reserves.length === 0 ? 0 : reserves.length * Math.max(...reserves)) + kept <= this.tokens
  }
}
