// The allowance counts calls per calendar month, in UTC so every replica and
// every time zone agree on when a month starts. A month is named YYYY-MM.

export interface Month {
  /** YYYY-MM (UTC). */
  id: string
  /** Unix ms of the month's first instant. */
  startMs: number
  /** Unix ms of the next month's first instant: when the allowance renews. */
  endMs: number
}

export function monthOf (ms: number): Month {
  const d = new Date(ms)
  const year = d.getUTCFullYear()
  const month = d.getUTCMonth()
  return {
    id: `${year}-${String(month + 1).padStart(2, '0')}`,
    startMs: Date.UTC(year, month, 1),
    endMs: Date.UTC(year, month + 1, 1),
  }
}
