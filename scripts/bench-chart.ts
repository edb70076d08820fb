// A small SVG chart of a benchmark report: aggregate tokens/s per number of
// concurrent streams (bars) with each level's inter-token latency p95.
interface ChartLevel { concurrency: number; aggregate_tok_s: number | null; itl_p95_ms: number | null }
interface ChartReport { model: string; machine: string; device: string; decode_tok_s_1: number | null; ttft_ms_128: number | null; levels: ChartLevel[] }

export function renderBenchChart (report: ChartReport): string {
  const width = 640
  const height = 360
  const left = 70
  const bottom = 300
  const top = 60
  const plotWidth = width - left - 30
  const max = Math.max(1, ...report.levels.map(l => l.aggregate_tok_s ?? 0)) * 1.15
  const slot = plotWidth / report.levels.length
  const barWidth = slot * 0.55
  const y = (v: number): number => bottom - ((bottom - top) * v) / max
  const esc = (s: string): string => s.replace(/&/g, '&amp;').replace(/</g, '&lt;')
  const parts: string[] = []
  parts.push(`<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}" viewBox="0 0 ${width} ${height}" font-family="sans-serif" font-size="12">`)
  parts.push(`<rect width="${width}" height="${height}" fill="#fff"/>`)
  parts.push(`<text x="${left}" y="22" font-size="15" font-weight="bold">chatd: aggregate decode tokens/s by concurrent streams</text>`)
  parts.push(`<text x="${left}" y="40" fill="#555">${esc(report.model)}; ${esc(report.machine)}, ${esc(report.device)}; 1 stream: ${report.decode_tok_s_1} tok/s, TTFT ${report.ttft_ms_128} ms</text>`)
  for (let i = 0; i <= 4; i++) {
    const v = (max / 1.15) * (i / 4)
    parts.push(`<line x1="${left}" x2="${width - 30}" y1="${y(v)}" y2="${y(v)}" stroke="#e5e5e5"/>`)
    parts.push(`<text x="${left - 8}" y="${y(v) + 4}" text-anchor="end" fill="#555">${v.toFixed(0)}</text>`)
  }
  report.levels.forEach((l, i) => {
    const value = l.aggregate_tok_s ?? 0
    const x = left + slot * i + (slot - barWidth) / 2
    parts.push(`<rect x="${x}" y="${y(value)}" width="${barWidth}" height="${bottom - y(value)}" fill="#3b6fd8"/>`)
    parts.push(`<text x="${x + barWidth / 2}" y="${y(value) - 6}" text-anchor="middle" font-weight="bold">${value.toFixed(1)}</text>`)
    parts.push(`<text x="${x + barWidth / 2}" y="${bottom + 18}" text-anchor="middle">${l.concurrency} stream${l.concurrency === 1 ? '' : 's'}</text>`)
    parts.push(`<text x="${x + barWidth / 2}" y="${bottom + 34}" text-anchor="middle" fill="#555">ITL p95 ${l.itl_p95_ms ?? '?'} ms</text>`)
  })
  parts.push(`<line x1="${left}" x2="${left}" y1="${top}" y2="${bottom}" stroke="#333"/>`)
  parts.push(`<line x1="${left}" x2="${width - 30}" y1="${bottom}" y2="${bottom}" stroke="#333"/>`)
  parts.push(`<text transform="translate(18 ${(top + bottom) / 2}) rotate(-90)" text-anchor="middle" fill="#333">tokens/s (all streams)</text>`)
  parts.push('</svg>')
  return parts.join('\n') + '\n'
}
