// Runs llama.cpp's own benchmark tools on the model and reads their
// machine-readable output:
//   llama-bench -p P -n G -t T -o json        one sequence: prompt tok/s (ppP)
//                                             and decode tok/s (tgG), each the
//                                             mean of -r repetitions;
//   llama-batched-bench -npp P -ntg G -npl 1,2,4,8 --output-format jsonl
//                                             N independent sequences, each with
//                                             its own P-token prompt, decoded
//                                             together G steps.
import { exec } from './exec.ts'

export interface LlamaBenchResult {
  prefill_tok_s: number
  prefill_tok_s_stddev: number
  decode_tok_s: number
  decode_tok_s_stddev: number
  build_commit: string
  build_number: number
  cpu_info: string
  model_type: string
  n_threads: number
  /** A Vulkan build's device as ggml names it ('' when none was found and the CPU ran it, or a CPU build). */
  vulkan_device: string
}

export interface BatchedLevel {
  /** Parallel sequences. */
  sequences: number
  prompt_tokens: number
  generated_tokens: number
  /** All sequences' prompts, processed as one batch. */
  prefill_s: number
  decode_s: number
  /** Generated tokens of all sequences over prefill + decode: chatd's aggregate_tok_s. */
  aggregate_tok_s: number
  /** Generated tokens over the decode phase alone (llama-batched-bench's S_TG). */
  decode_tok_s: number
  /** Prompt tokens over the prefill phase (S_PP). */
  prefill_tok_s: number
}

/** `extra`: more arguments for the tool (`-ngl 99`: every layer on the GPU, for a GPU build). */
export function runLlamaBench (bin: string, model: string, opts: { prompt: number; gen: number; threads: number; reps: number; extra?: string[] }): LlamaBenchResult {
  const args = ['-m', model, '-p', String(opts.prompt), '-n', String(opts.gen), '-t', String(opts.threads), '-r', String(opts.reps), '-o', 'json', ...(opts.extra ?? [])]
  const r = exec(bin, args)
  return { ...parseLlamaBenchJson(r.stdout, opts), vulkan_device: vulkanDevice(r.stderr) }
}

/**
 * The Vulkan device ggml used, from its log ("ggml_vulkan: 0 = NVIDIA H100 80GB HBM3 (NVIDIA) | uma: 0 ...");
 * '' when it found none (it leaves out CPU renderers such as lavapipe unless GGML_VK_VISIBLE_DEVICES names them).
 */
export function vulkanDevice (log: string): string {
  return /^ggml_vulkan: 0 = (.+?)(?: \| |$)/m.exec(log)?.[1].trim() ?? ''
}

export function parseLlamaBenchJson (text: string, opts: { prompt: number; gen: number }): Omit<LlamaBenchResult, 'vulkan_device'> {
  // Only the JSON array goes to stdout; the loader's log goes to stderr, but be lenient about stray lines.
  const start = text.indexOf('[')
  const end = text.lastIndexOf(']')
  if (start < 0 || end < start) throw new Error(`llama-bench printed no JSON array:\n${text.slice(0, 2000)}`)
  const rows = JSON.parse(text.slice(start, end + 1)) as Array<Record<string, unknown>>
  const pp = rows.find(r => r.n_prompt === opts.prompt && r.n_gen === 0)
  const tg = rows.find(r => r.n_gen === opts.gen && r.n_prompt === 0)
  if (!pp || !tg) throw new Error(`llama-bench output lacks pp${opts.prompt} or tg${opts.gen}: ${JSON.stringify(rows.map(r => [r.n_prompt, r.n_gen]))}`)
  const num = (r: Record<string, unknown>, k: string): number => {
    const v = r[k]
    if (typeof v !== 'number' || !Number.isFinite(v)) throw new Error(`llama-bench field ${k} is ${JSON.stringify(v)}`)
    return v
  }
  return {
    prefill_tok_s: num(pp, 'avg_ts'),
    prefill_tok_s_stddev: num(pp, 'stddev_ts'),
    decode_tok_s: num(tg, 'avg_ts'),
    decode_tok_s_stddev: num(tg, 'stddev_ts'),
    build_commit: String(tg.build_commit ?? ''),
    build_number: Number(tg.build_number ?? 0),
    cpu_info: String(tg.cpu_info ?? ''),
    model_type: String(tg.model_type ?? ''),
    n_threads: num(tg, 'n_threads'),
  }
}

export function runBatchedBench (bin: string, model: string, opts: { prompt: number; gen: number; levels: number[]; threads: number; extra?: string[] }): BatchedLevel[] {
  // Room for every sequence's prompt and generation at the largest level (the
  // default would be the model's 131072 positions: gigabytes of cache for nothing).
  const ctx = Math.ceil((Math.max(...opts.levels) * (opts.prompt + opts.gen)) / 256) * 256
  const args = [
    '-m', model, '-c', String(ctx),
    '-npp', String(opts.prompt), '-ntg', String(opts.gen), '-npl', opts.levels.join(','),
    '-t', String(opts.threads), '-tb', String(opts.threads), '--output-format', 'jsonl', ...(opts.extra ?? []),
  ]
  const r = exec(bin, args)
  const levels = parseBatchedBenchJsonl(r.stdout + '\n' + r.stderr)
  const missing = opts.levels.filter(n => !levels.some(l => l.sequences === n))
  if (missing.length > 0) throw new Error(`llama-batched-bench reported no result for ${missing.join(', ')} sequence(s)`)
  return levels
}

export function parseBatchedBenchJsonl (text: string): BatchedLevel[] {
  const levels: BatchedLevel[] = []
  for (const line of text.split('\n')) {
    const trimmed = line.trim()
    if (!trimmed.startsWith('{') || !trimmed.includes('"speed_tg"')) continue
    const r = JSON.parse(trimmed) as Record<string, number>
    const prefill = r.t_pp
    const decode = r.t_tg
    levels.push({
      sequences: r.pl,
      prompt_tokens: r.pp,
      generated_tokens: r.tg,
      prefill_s: prefill,
      decode_s: decode,
      aggregate_tok_s: (r.pl * r.tg) / (prefill + decode),
      decode_tok_s: r.speed_tg,
      prefill_tok_s: r.speed_pp,
    })
  }
  return levels
}
