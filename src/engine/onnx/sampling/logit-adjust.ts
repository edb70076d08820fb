/**
 * The request's adjustments of one row of logits before sampling, in place, as OpenAI defines
 * them:
 *  - penalties over the tokens this sequence generated so far (its thinking included: the model
 *    wrote it), logit[t] -= count[t] * frequency_penalty + (count[t] > 0) * presence_penalty;
 *  - logit_bias: logit[t] += bias[t] (-100 all but bans a token, +100 all but forces it);
 *  - min_p: tokens whose probability (at the request's temperature) is below min_p times the most
 *    likely token's are dropped; greedy decoding is unchanged by it.
 */

export interface LogitAdjustments {
  presencePenalty?: number
  frequencyPenalty?: number
  /** Token id -> bias. */
  logitBias?: ReadonlyMap<number, number>
  minP?: number
  /** The request's temperature (min_p compares probabilities at it). */
  temperature: number
}

/** Whether the request adjusts logits at all (most do not: the row is left alone). */
export function adjustsLogits (a: LogitAdjustments): boolean {
  return (a.presencePenalty ?? 0) !== 0 || (a.frequencyPenalty ?? 0) !== 0 || (a.logitBias?.size ?? 0) > 0 || (a.minP ?? 0) > 0
}

/** Counts of generated tokens, kept by the sequence as it goes. */
export class TokenCounts {
  readonly counts = new Map<number, number>()

  add (id: number): void {
    this.counts.set(id, (this.counts.get(id) ?? 0) + 1)
  }
}

/** Applies the adjustments to `logits[0..n)` in place. */
export function adjustLogits (logits: Float32Array, n: number, a: LogitAdjustments, generated: TokenCounts): void {
  const presence = a.presencePenalty ?? 0
  const frequency = a.frequencyPenalty ?? 0
  if (presence !== 0 || frequency !== 0) {
    for (const [id, count] of generated.counts) if (id < n) logits[id] -= count * frequency + presence
  }
  if (a.logitBias) for (const [id, bias] of a.logitBias) if (id < n) logits[id] += bias
  const minP = a.minP ?? 0
  if (minP > 0 && a.temperature > 0) {
    let max = -Infinity
    for (let i = 0; i < n; i++) if (logits[i] > max) max = logits[i]
    // p[t] / p[max] = exp((logit[t] - max) / T) < min_p  <=>  logit[t] < max + T * ln(min_p)
    const floor = max + a.temperature * Math.log(minP)
    for (let i = 0; i < n; i++) if (logits[i] < floor) logits[i] = -Infinity
  }
}
