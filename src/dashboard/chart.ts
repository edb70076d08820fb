// The usage chart, drawn on the server as inline SVG: two bar charts (calls
// and tokens per day) over the last 30 days. No script and no chart library,
// so it shows with JavaScript off and passes a strict Content-Security-Policy.
// Every bar has a <title>, which browsers show as a tooltip and screen
// readers read.

import type { DailyUsage } from '../accounts/usage-records.ts'

const WIDTH = 720
const HEIGHT = 140
const LEFT = 48
const BOTTOM = 22
const TOP = 10

/** A round upper bound for the axis (1, 2, 5 x 10^n), so the scale reads easily. */
function niceMax (value: number): number {
  if (value <= 0) return 1
  const power = 10 ** Math.floor(Math.log10(value))
  for (const step of [1, 2, 5, 10]) if (value <= step * power) return step * power
  return 10 * power
}

const compact = (n: number): string => n >= 1_000_000 ? `${+(n / 1_000_000).toFixed(1)}M` : n >= 1000 ? `${+(n / 1000).toFixed(1)}k` : String(n)

function bars (days: DailyUsage[], value: (d: DailyUsage) => number, label: string, cssClass: string): string {
  const max = niceMax(Math.max(...days.map(value)))
  const plotWidth = WIDTH - LEFT - 8
  const plotHeight = HEIGHT - TOP - BOTTOM
  const slot = plotWidth / days.length
  const parts: string[] = []
  for (const fraction of [0, 0.5, 1]) {
    const y = TOP + plotHeight * (1 - fraction)
    parts.push(`<line class="grid" x1="${LEFT}" x2="${WIDTH - 8}" y1="${y.toFixed(1)}" y2="${y.toFixed(1)}"/>`)
    parts.push(`<text class="axis" x="${LEFT - 6}" y="${(y + 4).toFixed(1)}" text-anchor="end">${compact(max * fraction)}</text>`)
  }
  days.forEach((d, i) => {
    const v = value(d)
    const h = (v / max) * plotHeight
    const x = LEFT + i * slot + slot * 0.15
    parts.push(`<rect class="${cssClass}" x="${x.toFixed(1)}" y="${(TOP + plotHeight - h).toFixed(1)}" width="${(slot * 0.7).toFixed(1)}" height="${Math.max(h, v > 0 ? 1 : 0).toFixed(1)}"><title>${d.date}: ${v} ${label}</title></rect>`)
  })
  for (const i of [0, Math.floor(days.length / 2), days.length - 1]) {
    const x = LEFT + i * slot + slot / 2
    parts.push(`<text class="axis" x="${x.toFixed(1)}" y="${HEIGHT - 6}" text-anchor="middle">${days[i].date.slice(5)}</text>`)
  }
  return `<svg class="chart" viewBox="0 0 ${WIDTH} ${HEIGHT}" role="img" aria-label="${label} per day, last ${days.length} days">${parts.join('')}</svg>`
}

export function usageCharts (days: DailyUsage[]): { calls: string; tokens: string } {
  return {
    calls: bars(days, d => d.calls, 'calls', 'bar-calls'),
    tokens: bars(days, d => d.total_tokens, 'tokens', 'bar-tokens'),
  }
}
