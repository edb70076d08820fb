// A conversation's next turn, computed ahead while the engine is idle.
//
// A chat client sends the reply it got back as an assistant message of the
// next request. The prefix cache keeps the prompt each request computed, but
// not the reply in the form the next prompt holds it: the reply was generated
// after the template's opening of an assistant turn (R1's `<think>\n`), it may
// be rendered without its thinking, and with a prompt graph generated tokens
// came from the other graph. So the next turn would compute the previous answer
// again before its new message. Once a reply is out, the engine renders the
// conversation as the next turn will start (the messages, then the reply as an
// earlier assistant turn, then a user turn's opening) and, when nothing else is waiting,
// feeds those tokens on top of the cached prompt and keeps the result in the
// prefix cache. The next turn then computes only its new message. Everything is
// fed as prompt tokens, exactly as a request holding them would feed them, so
// replies are the same with and without this. What is computed ahead belongs to
// the conversation's cache scope (its account): only that scope's requests
// reuse it.
import type { ChatMessage } from '../../backend.ts'
import type { CacheManager } from './cache-manager.ts'
import { KvBudget } from './kv-budget.ts'
import type { CacheLayout, CacheRoom, RowCache } from './kv-cache.ts'

/** Conversations waiting to be computed ahead; older ones give way to newer. */
export const MAX_PENDING = 4

/**
 * Prompt tokens per run while computing ahead: a request that arrives meanwhile waits at most one
 * such run (about 0.35 s on two cores with the int8 prompt graph).
 */
export const AHEAD_CHUNK = 64

/**
 * The token ids every next turn of `conversation` starts with. A template may render the last
 * assistant turn otherwise than an earlier one (Qwen3's keeps an empty thinking block only after
 * the last user message), so the conversation is rendered as a next turn would have it, once
 * with each of two different user messages after it, and the ids the two share are taken.
 */
export function nextTurnIds (conversation: ChatMessage[], encode: (messages: ChatMessage[]) => number[]): number[] {
  const a = encode([...conversation, { role: 'user', content: 'A' }])
  const b = encode([...conversation, { role: 'user', content: 'B' }])
  let shared = 0
  while (shared < a.length && shared < b.length && a[shared] === b[shared]) shared++
  return a.slice(0, shared)
}

/** A conversation to compute ahead, and the cache scope of the request it came from. */
export interface PendingTurn {
  messages: ChatMessage[]
  scope: string
}

/** Conversations waiting to be computed ahead, oldest first; beyond MAX_PENDING the oldest is dropped. */
export class NextTurns<T> {
  readonly #pending: T[] = []

  get size (): number {
    return this.#pending.length
  }

  add (conversation: T): void {
    this.#pending.push(conversation)
    if (this.#pending.length > MAX_PENDING) this.#pending.shift()
  }

  /** The newest conversation: the one whose next turn is nearest. */
  take (): T | undefined {
    return this.#pending.pop()
  }

  clear (): void {
    this.#pending.length = 0
  }
}

export interface AheadRun {
  layout: CacheLayout
  prefixes: CacheManager
  /** The conversation's cache scope: it reuses and keeps only that scope's entries. */
  scope: string
  /** True once real work is waiting: the run stops after its current chunk. */
  interrupted: () => boolean
  /** Most tokens one run may take (AHEAD_CHUNK, or less where the graph's logits bound it). */
  chunk: number
  /**
   * Runs a chunk of prompt tokens (the prompt graph where there is one); `room`: the positions
   * reserved for the whole turn, which the cache grows to at once.
   */
  feed: (cache: RowCache, tokens: number[], room: CacheRoom) => Promise<RowCache>
}

/**
 * Feeds `ids` on top of the longest cached prefix of them, a chunk at a time, and keeps what was
 * computed (all of it, or as far as it got before an interruption) in the prefix cache. Returns
 * the positions computed.
 */
export async function computeAhead (ids: number[], run: AheadRun): Promise<number> {
  const match = run.prefixes.lookup(run.scope, ids, ids.length)
  if (match && match.length >= ids.length) return 0
  // Room from the scope's own entries, or others' beyond their fair share; never the one extended.
  const reserved = KvBudget.reserveOf(ids.length, 0)
  if (!run.prefixes.makeRoom(run.scope, [{ scope: run.scope, positions: reserved }], { keep: match?.entry })) return 0
  let cache = match ? run.prefixes.take(match, ids.length) : run.layout.empty(1)
  const start = cache.lengths[0]
  let cached = start
  try {
    while (cached < ids.length) {
      const chunk = ids.slice(cached, cached + run.chunk)
      cache = await run.feed(cache, chunk, { most: reserved, least: ids.length })
      cached += chunk.length
      if (run.interrupted()) break
    }
  } catch {
    // A failed run leaves the cache it was given as it was: what the earlier chunks computed is kept.
  }
  // Kept as computed, not copied: its room is the turn's (`reserved`), so it wastes little.
  if (cached > start) run.prefixes.insert(run.scope, ids.slice(0, cached), run.layout.settle(cache))
  else run.layout.free(cache)
  return cached - start
}
