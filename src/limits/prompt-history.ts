// Which part of a prompt is likely served from the account's own prefix cache,
// guessed before the request runs, so the tier's reservation counts cached
// tokens as the settlement will (at the tier's cached_prompt_tokens_weight):
// an agent resends its whole conversation every turn, and without the guess
// the second turn of a Claude Code session (12,000 tokens, nearly all cached)
// would reserve as if none were. The guess is the longest run of leading parts
// (the tools' definitions, then each message) equal to the same key's previous
// request: what a prefix cache keyed by the same account would hold. It is
// only the reservation's estimate; the real cached count, reported by the
// backend, is what the minute keeps once the request ends. Per process, a few
// bytes a key, bounded (least recently used keys forgotten): a replica that
// has not seen the key guesses nothing.
import { createHash } from 'node:crypto'

/** Keys (account, model, cache salt) remembered at most. */
const KEYS_MAX = 10_000
/** Parts (messages) remembered per key; a longer conversation's tail is not guessed. */
const PARTS_MAX = 4096

interface Seen {
  /** A short digest of each part, in order. */
  digests: string[]
}

const digest = (text: string): string => createHash('sha256').update(text).digest('base64url').slice(0, 16)

export class PromptHistory {
  readonly #seen = new Map<string, Seen>()

  /**
   * Characters of `parts` (in prompt order) that lead the same way as `key`'s last remembered
   * prompt; `remember()` makes these parts that prompt, for a request that ran (its prompt is then
   * in the cache; one that was refused or never started leaves nothing there).
   */
  guess (key: string, parts: string[]): { cachedChars: number; remember: () => void } {
    const digests = parts.slice(0, PARTS_MAX).map(digest)
    const before = this.#seen.get(key)
    let cachedChars = 0
    if (before) {
      for (let i = 0; i < digests.length && i < before.digests.length && digests[i] === before.digests[i]; i++) cachedChars += parts[i].length
    }
    return {
      cachedChars,
      remember: () => {
        this.#seen.delete(key)
        this.#seen.set(key, { digests })
        if (this.#seen.size > KEYS_MAX) this.#seen.delete(this.#seen.keys().next().value as string)
      },
    }
  }
}
