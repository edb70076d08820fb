// Where a WebGPU decode step's time goes, from onnxruntime's profiling trace of a session that ran
// decode steps only: each node's host time (the WebGPU provider's Compute, which records its
// dispatches: the host's part of a step) and each GPU program's duration (the provider's timestamp
// queries, where the device has them), per step. For scripts/bench/decode-runs.ts.
import { linesBy, readTrace, type ProfileLine, type TraceEvent } from '../profile-trace.ts'

/** One line of a breakdown: what, its time per step, and how many of it a step runs. */
export interface KernelLine { what: string; us_per_step: number; per_step: number }

export interface KernelProfile {
  steps: number
  /** onnxruntime's own time of a run (model_run), mean over the steps. */
  run_ms: number
  /** The nodes' host time per step, summed (the rest of run_ms is onnxruntime's between nodes). */
  host_ms: number
  /** Nodes a step runs, and GPU programs it dispatches (0 without timestamp queries). */
  nodes: number
  dispatches: number
  /** The GPU programs' durations per step, summed (they may overlap the host's part). */
  gpu_ms: number
  host_by_op: KernelLine[]
  gpu_by_program: KernelLine[]
}

/** Summarizes the trace `file` (read by profile-trace.ts) of a session whose runs were all decode steps. */
export function summarizeKernelTrace (file: string, top = 12): KernelProfile {
  const { runs, nodes, programs } = readTrace(file)
  const steps = Math.max(1, runs.length)
  const lines = (list: TraceEvent[], keyOf: (e: TraceEvent) => string): KernelLine[] =>
    linesBy(list, runs.length, keyOf).slice(0, top).map((l: ProfileLine) => ({ what: l.key, us_per_step: l.usPerRun, per_step: l.nodesPerRun }))
  const sum = (list: TraceEvent[]): number => list.reduce((n, e) => n + e.dur, 0) / steps / 1000
  return {
    steps: runs.length,
    run_ms: sum(runs),
    host_ms: sum(nodes),
    nodes: nodes.length / steps,
    dispatches: programs.length / steps,
    gpu_ms: sum(programs),
    host_by_op: lines(nodes, e => `${e.args?.op_name ?? '?'}${e.args?.provider === 'CPUExecutionProvider' ? ' (CPU)' : ''}`),
    // The provider's GPU events are named node&operator&program.
    gpu_by_program: lines(programs, e => e.name.split('&').at(-1) ?? e.name),
  }
}

/** A few lines for a report. */
export function formatKernelProfile (p: KernelProfile): string {
  const list = (l: KernelLine[]): string => l.slice(0, 6).map(x => `${x.what} ${(x.us_per_step / 1000).toFixed(2)} ms (${x.per_step.toFixed(0)})`).join(', ')
  return [
    `  profile of ${p.steps} steps: run ${p.run_ms.toFixed(2)} ms, nodes' host time ${p.host_ms.toFixed(2)} ms (${p.nodes.toFixed(0)} nodes), GPU programs ${p.gpu_ms.toFixed(2)} ms (${p.dispatches.toFixed(0)} dispatches)`,
    `  host, by operator: ${list(p.host_by_op)}`,
    ...(p.gpu_by_program.length > 0 ? [`  GPU, by program: ${list(p.gpu_by_program)}`] : []),
  ].join('\n')
}
