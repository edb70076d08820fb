// Figures from repeated rounds. One run on a shared 2-core machine moves by
// ±25%, more than the margins the benchmark judges, so every figure and ratio
// it prints is the median of several rounds with the range beside it, and a
// round far from the others is named rather than silently dropped.

export interface RoundSummary {
  median: number | null
  min: number | null
  max: number | null
  /** Every round's value, in order (null where a round had none). */
  rounds: Array<number | null>
  /** Rounds (1-based) whose value is more than twice, or less than half, the median of the others. */
  outliers: number[]
}

export function summarize (values: Array<number | null | undefined>): RoundSummary {
  const rounds = values.map(v => (typeof v === 'number' && Number.isFinite(v) ? v : null))
  const present = rounds.filter((v): v is number => v !== null)
  const outliers: number[] = []
  rounds.forEach((v, i) => {
    if (v === null) return
    const others = rounds.filter((o, j): o is number => j !== i && o !== null)
    if (others.length === 0) return
    const m = median(others)
    if (m > 0 && (v > 2 * m || v < m / 2)) outliers.push(i + 1)
  })
  return {
    median: present.length > 0 ? round2(median(present)) : null,
    min: present.length > 0 ? round2(Math.min(...present)) : null,
    max: present.length > 0 ? round2(Math.max(...present)) : null,
    rounds: rounds.map(v => (v === null ? null : round2(v))),
    outliers,
  }
}

/** The median (the mean of the middle two for an even count). */
export function median (xs: number[]): number {
  const sorted = [...xs].sort((a, b) => a - b)
  const mid = Math.floor(sorted.length / 2)
  return sorted.length % 2 === 1 ? sorted[mid] : (sorted[mid - 1] + sorted[mid]) / 2
}

/** a / b per round, for ratios that pair each round's two measurements. */
export function perRoundRatio (a: Array<number | null | undefined>, b: Array<number | null | undefined>): Array<number | null> {
  return a.map((x, i) => {
    const y = b[i]
    return typeof x === 'number' && typeof y === 'number' && y > 0 ? x / y : null
  })
}

/** "1.23 (1.10-1.31)", with the outlying rounds named. */
export function formatSummary (s: RoundSummary): string {
  if (s.median === null) return 'n/a'
  const range = s.min === s.max ? '' : ` (${s.min}-${s.max})`
  return `${s.median}${range}${s.outliers.length > 0 ? ` [outlier round${s.outliers.length > 1 ? 's' : ''} ${s.outliers.join(', ')}]` : ''}`
}

function round2 (x: number): number {
  return Math.round(x * 100) / 100
}
