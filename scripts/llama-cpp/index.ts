// llama.cpp on this machine, for the benchmark's ratios: fetch the pinned
// source, build the tools, write the same model as Q4_0 (all cached under
// bench-out/), then measure. Preparing is split from measuring so the
// benchmark can do the heavy, cached work before any timing starts.
import { spawnSync } from 'node:child_process'
import os from 'node:os'
import path from 'node:path'
import { buildLlamaCpp, CMAKE_FLAGS, type LlamaCppBuild } from './build.ts'
import { buildLlamaCppModel, type LlamaCppModel } from './model.ts'
import { type BatchedLevel, runBatchedBench, runLlamaBench } from './run.ts'
import { fetchLlamaCppSource, type LlamaCppSource } from './source.ts'
import { prepareVulkanBuild, type VulkanBuild } from './vulkan.ts'

export { LlamaCppUnavailable } from './exec.ts'

export interface LlamaCppPrepared {
  source: LlamaCppSource
  build: LlamaCppBuild | VulkanBuild
  model: LlamaCppModel
  threads: number
  /** Seconds spent fetching and cloning the source in this run (build and model carry their own). */
  fetch_s: number
}

export function prepareLlamaCpp (opts: { out: string; threads: number; jobs?: number; npmVersion?: string; log?: (line: string) => void }): LlamaCppPrepared {
  const log = opts.log ?? ((line: string) => console.error(line))
  const started = performance.now()
  const source = fetchLlamaCppSource(opts.out, opts.npmVersion, log)
  const fetchSeconds = (performance.now() - started) / 1000
  let build = buildLlamaCpp(opts.out, source, { jobs: opts.jobs, log })
  if (!build.cached) log(`built llama.cpp tools in ${build.seconds.toFixed(0)} s`)
  const threads = opts.threads > 0 ? opts.threads : os.availableParallelism()
  const model = buildLlamaCppModel(opts.out, build, { threads, log })
  if (!model.cached) log(`wrote ${path.relative(process.cwd(), model.file)} (${model.types}) in ${model.seconds.toFixed(0)} s`)
  const crash = smokeRun(build, model.file, threads)
  if (crash && build.variant === 'native') {
    log(`llama.cpp's native build died by ${crash} in a smoke run (seen with ggml's AMX kernels on a VM); rebuilding with AMX off ...`)
    build = buildLlamaCpp(opts.out, source, { jobs: opts.jobs, log, variant: 'no-amx' })
    log(`built llama.cpp tools (no-amx) in ${build.seconds.toFixed(0)} s`)
    const again = smokeRun(build, model.file, threads)
    if (again) throw new Error(`llama-bench still dies by ${again} with AMX off; no llama.cpp figures on this machine`)
  } else if (crash) {
    throw new Error(`llama-bench (${build.variant} build) dies by ${crash}; no llama.cpp figures on this machine`)
  }
  return { source, build, model, threads, fetch_s: fetchSeconds }
}

/**
 * llama.cpp's Vulkan build (node-llama-cpp's npm libraries, vulkan.ts) and the model for it
 * (`config`: the model's shape, the benchmark's by default); every layer runs on the GPU.
 */
export function prepareLlamaCppVulkan (opts: { out: string; threads: number; config?: string; npmVersion?: string; log?: (line: string) => void }): LlamaCppPrepared {
  const log = opts.log ?? ((line: string) => console.error(line))
  const build = prepareVulkanBuild(opts.out, { npmVersion: opts.npmVersion, log })
  if (!build.cached) log(`prepared llama.cpp's Vulkan build in ${build.seconds.toFixed(0)} s`)
  const threads = opts.threads > 0 ? opts.threads : os.availableParallelism()
  const model = buildLlamaCppModel(opts.out, build, { threads, config: opts.config, log })
  if (!model.cached) log(`wrote ${path.relative(process.cwd(), model.file)} (${model.types}) in ${model.seconds.toFixed(0)} s`)
  const npmVersion = build.package.slice(build.package.lastIndexOf('@') + 1)
  return { source: { dir: '', npmVersion, tag: build.tag, commit: build.commit }, build, model, threads, fetch_s: 0 }
}

/** A few tokens through llama-bench: the signal that killed it, or null when it ran. */
function smokeRun (build: LlamaCppBuild, model: string, threads: number): string | null {
  const r = spawnSync(build.bin('llama-bench'), ['-m', model, '-p', '8', '-n', '4', '-r', '1', '-t', String(threads), '-o', 'json'], { stdio: 'ignore' })
  return r.signal ?? null
}

export interface LlamaCppReport {
  llama_cpp_version: string
  llama_cpp_commit: string
  llama_cpp_source: string
  llama_cpp_build: string
  llama_cpp_model: string
  llama_cpp_threads: number
  /** A Vulkan build's device ('' for a CPU build, or a Vulkan build that found no device and ran on the CPU). */
  llama_cpp_vulkan_device: string
  llama_cpp_prefill_tok_s: number | null
  llama_cpp_prefill_tok_s_stddev: number | null
  llama_cpp_decode_tok_s_1: number | null
  llama_cpp_decode_tok_s_1_stddev: number | null
  /** llama_cpp_aggregate_tok_s_N for each level, as chatd's aggregate_tok_s_N. */
  [key: `llama_cpp_aggregate_tok_s_${number}`]: number | null
  llama_cpp_levels: Array<{ concurrency: number; aggregate_tok_s: number | null; decode_tok_s: number | null; prefill_tok_s: number | null }>
}

export function measureLlamaCpp (p: LlamaCppPrepared, opts: { prompt: number; gen: number; levels: number[]; reps?: number; log?: (line: string) => void }): LlamaCppReport {
  const log = opts.log ?? ((line: string) => console.error(line))
  const vulkan = p.build.variant === 'vulkan'
  // A GPU build: every layer on the GPU.
  const extra = vulkan ? ['-ngl', '99'] : []
  log(`llama.cpp${vulkan ? ' (Vulkan)' : ''}: llama-bench pp${opts.prompt} / tg${opts.gen}, ${p.threads} threads ...`)
  const single = runLlamaBench(p.build.bin('llama-bench'), p.model.file, { prompt: opts.prompt, gen: opts.gen, threads: p.threads, reps: opts.reps ?? 5, extra })
  if (vulkan && !single.vulkan_device) log('llama.cpp (Vulkan): ggml found no Vulkan device and ran on the CPU (a software renderer is left out unless GGML_VK_VISIBLE_DEVICES names it)')
  log(`llama.cpp${vulkan ? ' (Vulkan)' : ''}: llama-batched-bench at ${opts.levels.join(', ')} sequences ...`)
  const batched = runBatchedBench(p.build.bin('llama-batched-bench'), p.model.file, { prompt: opts.prompt, gen: opts.gen, levels: opts.levels, threads: p.threads, extra })
  const at = (n: number): BatchedLevel | undefined => batched.find(l => l.sequences === n)
  const report: LlamaCppReport = {
    llama_cpp_version: p.source.tag,
    llama_cpp_commit: p.source.commit,
    llama_cpp_source: `node-llama-cpp@${p.source.npmVersion} (npm), llama.cpp ${p.source.tag} build ${single.build_commit}`,
    llama_cpp_build: 'package' in p.build
      ? `${p.build.package}'s prebuilt libraries (Vulkan backend, every layer on the GPU: -ngl 99), tools compiled against them; ${single.cpu_info}`
      : `${CMAKE_FLAGS.filter(f => /BUILD_TYPE|NATIVE/.test(f)).map(f => f.replace(/^-D/, '')).join(' ')}${p.build.variant === 'no-amx' ? ' with AMX off (the native build crashed in ggml\'s AMX matmul here)' : ''}, CPU backend; ${single.cpu_info}`,
    llama_cpp_model: `${single.model_type} from llama-quantize Q4_0 (${p.model.types}), ${(p.model.bytes / 2 ** 30).toFixed(2)} GiB`,
    llama_cpp_threads: p.threads,
    llama_cpp_vulkan_device: single.vulkan_device,
    llama_cpp_prefill_tok_s: round(single.prefill_tok_s),
    llama_cpp_prefill_tok_s_stddev: round(single.prefill_tok_s_stddev),
    llama_cpp_decode_tok_s_1: round(single.decode_tok_s),
    llama_cpp_decode_tok_s_1_stddev: round(single.decode_tok_s_stddev),
    llama_cpp_levels: opts.levels.map(n => ({
      concurrency: n,
      aggregate_tok_s: round(at(n)?.aggregate_tok_s),
      decode_tok_s: round(at(n)?.decode_tok_s),
      prefill_tok_s: round(at(n)?.prefill_tok_s),
    })),
  }
  for (const n of opts.levels) report[`llama_cpp_aggregate_tok_s_${n}`] = round(at(n)?.aggregate_tok_s)
  return report
}

/** chatd's figure over llama.cpp's for the same quantity: above 1 means chatd is faster. */
export function llamaCppRatios (chatd: Record<string, unknown>, llama: LlamaCppReport, levels: number[]): Record<string, number | null> {
  const ratio = (ours: unknown, theirs: unknown): number | null =>
    typeof ours === 'number' && typeof theirs === 'number' && theirs > 0 ? Math.round((ours / theirs) * 100) / 100 : null
  const out: Record<string, number | null> = {
    ratio_decode_1: ratio(chatd.decode_tok_s_1, llama.llama_cpp_decode_tok_s_1),
    ratio_engine_decode_1: ratio(chatd.engine_only_decode_tok_s_1, llama.llama_cpp_decode_tok_s_1),
    ratio_prefill: ratio(chatd.prefill_tok_s, llama.llama_cpp_prefill_tok_s),
  }
  for (const n of levels) out[`ratio_aggregate_${n}`] = ratio(chatd[`aggregate_tok_s_${n}`], llama[`llama_cpp_aggregate_tok_s_${n}`])
  return out
}

function round (x: number | undefined): number | null {
  return x === undefined || !Number.isFinite(x) ? null : Math.round(x * 10) / 10
}
