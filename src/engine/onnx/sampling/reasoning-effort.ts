/**
 * `reasoning_effort` as a thinking budget, in tokens, for a reply that may generate
 * `maxNewTokens`: `none` and `minimal` close the thinking block at once (0); `low`, `medium` and
 * `high` allow a share of the reply's tokens, up to a ceiling, so the answer keeps the rest.
 * When the budget is spent the engine closes the block (`</think>`) and the model answers.
 */
import type { ReasoningEffort } from '../../backend.ts'

export const EFFORT_BUDGETS = {
  low: { share: 0.25, most: 1024 },
  medium: { share: 0.5, most: 4096 },
  high: { share: 0.75, most: 16384 },
} as const

/** The budget; undefined without an effort (thinking is then free). */
export function effortBudget (effort: ReasoningEffort | undefined, maxNewTokens: number): number | undefined {
  if (effort === undefined) return undefined
  if (effort === 'none' || effort === 'minimal') return 0
  const { share, most } = EFFORT_BUDGETS[effort]
  return Math.max(1, Math.min(most, Math.floor(maxNewTokens * share)))
}
