// A small SVG chart of a benchmark report: aggregate tokens/s per number of
// concurrent streams (bars) with each level's inter-token latency p95, and,
// when llama.cpp was measured in the same run, its bar beside chatd's with
// the ratio, since our goals are stated as those ratios.
interface ChartLevel { concurrency: number; aggregate_tok_s: number | null; itl_p95_ms: number | null }
interface LlamaLevel { concurrency: number; aggregate_tok_s: number | null }
interface ChartReport {
  model: string
  machine: string
  device: string
  decode_tok_s_1: number | null
  prefill_tok_s?: number | null
  ttft_ms_128: number | null
  levels: ChartLevel[]
  llama_cpp_version?: string
  llama_cpp_decode_tok_s_1?: number | null
  llama_cpp_prefill_tok_s?: number | null
  llama_cpp_levels?: LlamaLevel[]
  ratio_decode_1?: number | null
  ratio_prefill?: number | null
}

const CHATD = '#3b6fd8'
const LLAMA = '#9a9a9a'

export function renderBenchChart (report: ChartReport): string {
  const llama = report.llama_cpp_levels
  const llamaAt = (n: number): number | null => llama?.find(l => l.concurrency === n)?.aggregate_tok_s ?? null
  // Wider with llama.cpp: two bars per level and a second subtitle line.
  const width = llama ? 800 : 640
  const height = llama ? 400 : 360
  const left = 70
  const top = llama ? 84 : 60
  const bottom = llama ? 320 : 300
  const plotWidth = width - left - 30
  const values = report.levels.flatMap(l => [l.aggregate_tok_s ?? 0, llamaAt(l.concurrency) ?? 0])
  const max = Math.max(1, ...values) * 1.15
  const slot = plotWidth / report.levels.length
  const barWidth = slot * (llama ? 0.36 : 0.55)
  const y = (v: number): number => bottom - ((bottom - top) * v) / max
  const esc = (s: string): string => s.replace(/&/g, '&amp;').replace(/</g, '&lt;')
  const parts: string[] = []
  parts.push(`<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}" viewBox="0 0 ${width} ${height}" font-family="sans-serif" font-size="12">`)
  parts.push(`<rect width="${width}" height="${height}" fill="#fff"/>`)
  parts.push(`<text x="${left}" y="22" font-size="15" font-weight="bold">chatd: aggregate decode tokens/s by concurrent streams</text>`)
  parts.push(`<text x="${left}" y="40" fill="#555">${esc(report.model)}; ${esc(report.machine)}, ${esc(report.device)}; 1 stream: ${report.decode_tok_s_1} tok/s, TTFT ${report.ttft_ms_128} ms</text>`)
  if (llama) {
    parts.push(`<text x="${left}" y="58" fill="#555">llama.cpp ${esc(report.llama_cpp_version ?? '')} Q4_0, same machine and run: 1 stream ${report.llama_cpp_decode_tok_s_1} tok/s (chatd ${report.ratio_decode_1}x), prefill ${report.llama_cpp_prefill_tok_s} tok/s (chatd ${report.ratio_prefill}x)</text>`)
    parts.push(`<rect x="${width - 200}" y="66" width="10" height="10" fill="${CHATD}"/><text x="${width - 186}" y="75">chatd</text>`)
    parts.push(`<rect x="${width - 130}" y="66" width="10" height="10" fill="${LLAMA}"/><text x="${width - 116}" y="75">llama.cpp</text>`)
  }
  for (let i = 0; i <= 4; i++) {
    const v = (max / 1.15) * (i / 4)
    parts.push(`<line x1="${left}" x2="${width - 30}" y1="${y(v)}" y2="${y(v)}" stroke="#e5e5e5"/>`)
    parts.push(`<text x="${left - 8}" y="${y(v) + 4}" text-anchor="end" fill="#555">${v.toFixed(0)}</text>`)
  }
  const bar = (x: number, value: number, fill: string): void => {
    parts.push(`<rect x="${x}" y="${y(value)}" width="${barWidth}" height="${bottom - y(value)}" fill="${fill}"/>`)
    parts.push(`<text x="${x + barWidth / 2}" y="${y(value) - 6}" text-anchor="middle" font-weight="bold">${value.toFixed(1)}</text>`)
  }
  report.levels.forEach((l, i) => {
    const value = l.aggregate_tok_s ?? 0
    const center = left + slot * i + slot / 2
    const theirs = llamaAt(l.concurrency)
    if (llama) {
      bar(center - barWidth - 2, value, CHATD)
      if (theirs !== null) bar(center + 2, theirs, LLAMA)
    } else {
      bar(center - barWidth / 2, value, CHATD)
    }
    parts.push(`<text x="${center}" y="${bottom + 18}" text-anchor="middle">${l.concurrency} stream${l.concurrency === 1 ? '' : 's'}</text>`)
    parts.push(`<text x="${center}" y="${bottom + 34}" text-anchor="middle" fill="#555">ITL p95 ${l.itl_p95_ms ?? '?'} ms</text>`)
    if (llama && theirs) parts.push(`<text x="${center}" y="${bottom + 50}" text-anchor="middle" fill="#555">chatd = ${(value / theirs).toFixed(2)}x llama.cpp</text>`)
  })
  parts.push(`<line x1="${left}" x2="${left}" y1="${top}" y2="${bottom}" stroke="#333"/>`)
  parts.push(`<line x1="${left}" x2="${width - 30}" y1="${bottom}" y2="${bottom}" stroke="#333"/>`)
  parts.push(`<text transform="translate(18 ${(top + bottom) / 2}) rotate(-90)" text-anchor="middle" fill="#333">tokens/s (all streams)</text>`)
  parts.push('</svg>')
  return parts.join('\n') + '\n'
}
