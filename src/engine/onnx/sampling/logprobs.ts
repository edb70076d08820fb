// Token log-probabilities (`logprobs`, `top_logprobs`) from one row of logits.
//
// They are the log-softmax of the logits the sampler saw: after a JSON
// grammar's mask (masked tokens have probability 0 and are never listed) and
// after the temperature (logits / T; at temperature 0, greedy decoding, the
// raw logits, i.e. T = 1), and before top-k / top-p truncation, which only
// narrows what may be drawn. Ids at or above the valid vocabulary (padding
// columns of the output layer) are not part of the distribution.
import type { TokenLogprob, TopLogprob } from '../../backend.ts'
import type { TokenTable } from '../text/token-bytes.ts'

/** What JSON cannot carry (-Infinity) is written as OpenAI writes "practically impossible". */
const IMPOSSIBLE = -9999

// Reused between calls (the engine is synchronous here): the top ids and their logits.
let topIds = new Int32Array(0)
let topValues = new Float64Array(0)

/**
 * The chosen token's log-probability and the `top` most likely tokens' (most likely first; equal
 * logits: the lower id first, as greedy decoding picks).
 *
 * @param logits the row the sampler saw (masked tokens at -Infinity)
 * @param n the valid vocabulary: ids below it
 */
export function tokenLogprob (logits: Float32Array, n: number, temperature: number, chosen: number, top: number, tokens: TokenTable): TokenLogprob {
  const scale = temperature > 0 ? 1 / temperature : 1
  let max = -Infinity
  for (let i = 0; i < n; i++) if (logits[i] > max) max = logits[i]
  let sum = 0
  if (max > -Infinity) {
    for (let i = 0; i < n; i++) {
      const l = logits[i]
      // -Infinity (masked) and NaN add nothing.
      if (l > -Infinity) sum += Math.exp((l - max) * scale)
    }
  }
  const logSum = Math.log(sum)
  // One formula for every id, so a token's own logprob equals its entry among the alternatives.
  const logprobOf = (id: number): number => {
    const value = (logits[id] - max) * scale - logSum
    return Number.isFinite(value) ? value : IMPOSSIBLE
  }
  const entry = (id: number): TopLogprob => ({ token: tokens.text(id), logprob: logprobOf(id), bytes: Array.from(tokens.bytes(id)) })

  const count = topIndices(logits, n, top)
  const alternatives: TopLogprob[] = []
  for (let k = 0; k < count; k++) alternatives.push(entry(topIds[k]))
  return { ...entry(chosen), top_logprobs: alternatives }
}

/**
 * Leaves the ids of the `k` largest finite-probability logits in topIds[0..count), largest first,
 * lower id first among equals; returns count (fewer than k when fewer tokens can be drawn).
 */
function topIndices (logits: Float32Array, n: number, k: number): number {
  if (k <= 0) return 0
  if (topIds.length < k) {
    topIds = new Int32Array(k)
    topValues = new Float64Array(k)
  }
  let count = 0
  for (let i = 0; i < n; i++) {
    const v = logits[i]
    if (!(v > -Infinity)) continue // masked or NaN: cannot be drawn
    if (count === k && !(v > topValues[count - 1])) continue
    // Insertion from the end: equal values stay ahead (they have lower ids).
    let at = count < k ? count++ : count - 1
    while (at > 0 && topValues[at - 1] < v) {
      topValues[at] = topValues[at - 1]
      topIds[at] = topIds[at - 1]
      at--
    }
    topValues[at] = v
    topIds[at] = i
  }
  return count
}
