// Reads onnxruntime's profiling trace (Chrome trace JSON) and says where a
// step's time goes: per operator type and per node family (the node name with
// its layer number taken out, so 28 layers' o_proj count as one line), split
// into prompt runs and decode steps. Used by `npm run bench:engine -- --profile`
// (and, for the WebGPU provider's GPU programs too, scripts/bench/kernel-profile.ts).
import fs from 'node:fs'

export interface TraceEvent {
  cat: string
  name: string
  ts: number
  dur: number
  args?: { op_name?: string; provider?: string }
}

export interface ProfileLine {
  /** Operator type, or node family with the layer index replaced by `*`. */
  key: string
  /** Microseconds per run of this kind, summed over the nodes on this line. */
  usPerRun: number
  share: number
  nodesPerRun: number
}

export interface ProfileSummary {
  runs: number
  /** Wall time of one run as onnxruntime measured it (model_run), mean, µs. */
  runUs: number
  /** Sum of node kernel times per run, µs; the rest of runUs is scheduling and copies outside nodes. */
  kernelUs: number
  byOp: ProfileLine[]
  byNode: ProfileLine[]
}

/**
 * A trace read once: its runs in time order, each node event tagged with the run it falls in, and
 * the WebGPU provider's GPU programs (named node&operator&program; timed on the GPU's clock, so
 * not placed in runs).
 */
export interface Trace {
  runs: TraceEvent[]
  nodes: Array<TraceEvent & { run: number }>
  programs: TraceEvent[]
}

export function readTrace (file: string): Trace {
  const events = JSON.parse(fs.readFileSync(file, 'utf8')) as TraceEvent[]
  const runs = events.filter(e => e.cat === 'Session' && e.name === 'model_run').sort((a, b) => a.ts - b.ts)
  const programs = events.filter(e => e.cat === 'Api')
  const kernels = events.filter(e => e.cat === 'Node' && e.name.endsWith('_kernel_time')).sort((a, b) => a.ts - b.ts)
  // Both in time order: one walk pairs every node with the run around it.
  const nodes: Trace['nodes'] = []
  let run = 0
  for (const e of kernels) {
    while (run < runs.length && e.ts > runs[run].ts + runs[run].dur) run++
    if (run < runs.length && e.ts >= runs[run].ts) nodes.push({ ...e, run })
  }
  return { runs, nodes, programs }
}

/** `events` grouped by `keyOf`: each line's time and count per run over `runs` runs, heaviest first. */
export function linesBy (events: TraceEvent[], runs: number, keyOf: (e: TraceEvent) => string): ProfileLine[] {
  const n = Math.max(1, runs)
  const sums = new Map<string, { us: number; count: number }>()
  for (const e of events) {
    const key = keyOf(e)
    const s = sums.get(key) ?? { us: 0, count: 0 }
    s.us += e.dur
    s.count++
    sums.set(key, s)
  }
  const total = [...sums.values()].reduce((a, s) => a + s.us, 0) || 1
  return [...sums.entries()]
    .map(([key, s]) => ({ key, usPerRun: s.us / n, share: s.us / total, nodesPerRun: s.count / n }))
    .sort((a, b) => b.usPerRun - a.usPerRun)
}

/**
 * Summarizes the runs that `isKind(runIndex)` picks, so prompt runs and
 * decode steps can be told apart.
 */
export function summarizeTrace (trace: Trace, isKind: (runIndex: number) => boolean): ProfileSummary {
  const picked = trace.runs.filter((_, i) => isKind(i))
  const nodes = trace.nodes.filter(e => isKind(e.run))
  const n = Math.max(1, picked.length)
  const group = (keyOf: (e: TraceEvent) => string): ProfileLine[] => linesBy(nodes, picked.length, keyOf)
  return {
    runs: picked.length,
    runUs: picked.reduce((a, r) => a + r.dur, 0) / n,
    kernelUs: nodes.reduce((a, e) => a + e.dur, 0) / n,
    byOp: group(e => e.args?.op_name ?? '?'),
    byNode: group(e => e.name.replace(/_kernel_time$/, '').replace(/\.\d+\./g, '.*.').replace(/_\d+$/, '')),
  }
}

/** A Markdown table of the heaviest lines. */
export function formatProfile (title: string, s: ProfileSummary, lines: ProfileLine[], top = 15): string {
  const out = [`${title}: ${s.runs} runs, ${(s.runUs / 1000).toFixed(2)} ms per run, ${(s.kernelUs / 1000).toFixed(2)} ms in node kernels`,
    '| what | ms per run | share of kernel time | nodes per run |', '|---|---:|---:|---:|']
  for (const l of lines.slice(0, top)) out.push(`| ${l.key} | ${(l.usPerRun / 1000).toFixed(3)} | ${(100 * l.share).toFixed(1)}% | ${l.nodesPerRun.toFixed(0)} |`)
  return out.join('\n')
}
