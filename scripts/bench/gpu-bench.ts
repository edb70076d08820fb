// npm run bench -- --device webgpu: chatd on a GPU through onnxruntime's WebGPU
// provider, against llama.cpp's Vulkan build on the same GPU, in one run:
//   - chatd (the real server over HTTP, ONNX_DEVICE=webgpu) on the benchmark
//     model in the form for a GPU host (int4 computed in float, the concat
//     cache that stays in GPU memory): one stream's time to first token,
//     prefill and decode, and the aggregate of N concurrent streams;
//   - llama.cpp's Vulkan build (node-llama-cpp's npm libraries, every layer on
//     the GPU) on the same seeded weights as Q4_0: llama-bench and
//     llama-batched-bench, as the CPU benchmark measures llama.cpp;
//   - chatd on the same machine's CPU (ONNX_DEVICE=cpu, the CPU form: the append
//     cache and the int8 prompt graph): one stream and the largest level;
//   - the captured Codex and Claude Code turns (agent-turns.ts) on the GPU
//     server: time to first token with nothing cached and with the
//     instructions cached.
// Rounds alternate llama.cpp and chatd, as the CPU benchmark's do; every figure
// is the median of the rounds. The report states the physical bound beside
// the figures (--bandwidth-gbs over the bytes of weights a decode step reads)
// and which targets of issue 39 the figures meet. The GPU's name comes from
// nvidia-smi where there is one, and from the Vulkan device llama.cpp used.
import { spawnSync } from 'node:child_process'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import type OpenAI from 'openai'
import { readModelDir } from '../../src/engine/onnx/model-dir.ts'
import { encodeChatPrompt } from '../../src/engine/onnx/text/chat-prompt.ts'
import { ChatTemplate } from '../../src/engine/onnx/text/chat-template.ts'
import { loadTokenizer } from '../../src/engine/onnx/text/tokenizer.ts'
import { benchModelDir } from '../bench-model.ts'
import { type LlamaCppPrepared, type LlamaCppReport, LlamaCppUnavailable, measureLlamaCpp, prepareLlamaCppVulkan } from '../llama-cpp/index.ts'
import { AGENTS, type Turn } from './agent-turns.ts'
import { BENCH_MODEL_ID, startChatdServer, type ChatdServer } from './chatd-server.ts'
import { measureHttpRound, oneStream, type HttpRound } from './http-round.ts'
import { formatSummary, median, perRoundRatio, summarize, type RoundSummary } from './rounds.ts'

export interface GpuBenchOptions {
  root: string
  out: string
  json?: string
  rounds: number
  threads: number
  prompt: number
  gen: number
  levels: number[]
  llamaCpp: boolean
  /** chatd on this machine's CPU as well. */
  cpuCompare: boolean
  /** The captured Codex and Claude Code turns on the GPU. */
  agentTurns: boolean
  /** The model's shape (a Qwen2 config.json); the benchmark's 1.5B shape by default. */
  config?: string
  /** The GPU's memory bandwidth in GB/s, for the physical bound (H100 SXM, HBM3: 3350). */
  bandwidthGbs: number
  /**
   * Also a server with ONNX_WEBGPU_CAPTURE of this many positions and ONNX_WEBGPU_CAPTURE_ROWS the
   * most streams measured (one stream's decode and the most streams' on the replayed step); 0: not.
   */
  capture?: number
  /** Build the models and prepare llama.cpp, then stop (the slow part, done ahead). */
  prepareOnly?: boolean
  log: (line: string) => void
}

interface Round {
  webgpu: HttpRound
  /** The server with the capture step (ONNX_WEBGPU_CAPTURE), and its decode tokens so far on replays and in all (its /metrics). */
  webgpu_capture?: HttpRound & { replayed_tokens: number; decode_tokens: number }
  cpu?: HttpRound
  llama_cpp?: LlamaCppReport
}

/** What the GPU is, as nvidia-smi says (name, driver, memory); null without it. */
function nvidiaSmi (): string | null {
  const r = spawnSync('nvidia-smi', ['--query-gpu=name,driver_version,memory.total', '--format=csv,noheader'], { encoding: 'utf8' })
  return r.status === 0 ? r.stdout.trim().split('\n')[0] : null
}

/** The server's own account of the model: the device it runs on, why, and whether its cache stays there (an admin key's view). */
async function deviceOf (client: OpenAI): Promise<Record<string, unknown>> {
  const model = await client.models.retrieve(BENCH_MODEL_ID) as unknown as Record<string, unknown>
  return { device: model.device, device_reason: model.device_reason, cache_on_device: model.cache_on_device }
}

export async function runGpuBench (o: GpuBenchOptions): Promise<Record<string, unknown>> {
  const log = o.log
  const date = new Date().toISOString()
  // ---- models: the GPU form, and the CPU form for the CPU comparison ----------
  const gpuModel = benchModelDir(32, 'chatd', { gpu: true, config: o.config })
  const capture = o.capture ?? 0
  const cpuModel = o.cpuCompare ? benchModelDir(32, 'chatd', { config: o.config }) : null
  const onnxBytes = (dir: string): number => {
    const graph = readModelDir(dir, 'q4').onnxPath
    return fs.statSync(graph).size + (fs.existsSync(`${graph}_data`) ? fs.statSync(`${graph}_data`).size : 0)
  }
  const weightBytes = onnxBytes(gpuModel)

  // ---- llama.cpp's Vulkan build and its model, before any timing ---------------
  let llama: LlamaCppPrepared | null = null
  let llamaError = o.llamaCpp ? '' : 'skipped (--no-llama-cpp)'
  if (o.llamaCpp) {
    try {
      llama = prepareLlamaCppVulkan({ out: o.out, threads: o.threads, config: o.config, log })
    } catch (err) {
      llamaError = err instanceof LlamaCppUnavailable ? `not measured: ${err.message}` : `failed: ${(err as Error).message}`
      log(`llama.cpp (Vulkan) ${llamaError}`)
    }
  }

  if (o.prepareOnly) {
    log(`prepared: ${gpuModel}${cpuModel ? `, ${cpuModel}` : ''}${llama ? `, ${llama.model.file}` : ''}`)
    return {}
  }

  // ---- the prompt: exactly o.prompt tokens after the chat template ------------
  const tokenizer = await loadTokenizer(gpuModel)
  const template = ChatTemplate.fromTokenizerConfig(tokenizer.config, `${gpuModel}/tokenizer_config.json`)
  const count = (content: string): number => encodeChatPrompt(template, tokenizer, [{ role: 'user', content }]).ids.length
  const words = 'the quick brown fox jumps over a lazy dog while seven wizards quietly judge boxing matches'.split(' ')
  let content = ''
  for (let i = 0; count(content + words[i % words.length] + ' ') <= o.prompt; i++) content += words[i % words.length] + ' '

  // ---- the report, from what has been measured so far --------------------------
  const maxLevel = Math.max(...o.levels)
  const rounds: Round[] = []
  let gpuDevice: Record<string, unknown> = {}
  const agentTurns: Record<string, { prompt_tokens: number; cached_tokens: number; ttft_s_uncached: number[]; ttft_s_cached: number[]; end_s_uncached: number[]; end_s_cached: number[] }> = {}
  /** The report; `partial` while measurements are still to come (it is saved after each, so a run cut short keeps what it had). */
  const build = (partial: boolean) => {
    const pick = (f: (r: Round) => number | null | undefined): Array<number | null> => rounds.map(r => f(r) ?? null)
    const level = (h: HttpRound | undefined, n: number) => h?.levels.find(l => l.concurrency === n)
    const figures: Record<string, RoundSummary> = {
      webgpu_decode_tok_s_1: summarize(pick(r => r.webgpu.decode_tok_s_1)),
      webgpu_prefill_tok_s: summarize(pick(r => r.webgpu.prefill_tok_s)),
      webgpu_ttft_ms: summarize(pick(r => r.webgpu.ttft_ms)),
    }
    for (const n of o.levels) figures[`webgpu_aggregate_tok_s_${n}`] = summarize(pick(r => level(r.webgpu, n)?.aggregate_tok_s))
    if (capture) {
      figures.webgpu_capture_decode_tok_s_1 = summarize(pick(r => r.webgpu_capture?.decode_tok_s_1))
      figures[`webgpu_capture_aggregate_tok_s_${maxLevel}`] = summarize(pick(r => level(r.webgpu_capture, maxLevel)?.aggregate_tok_s))
    }
    if (cpuModel) {
      figures.cpu_decode_tok_s_1 = summarize(pick(r => r.cpu?.decode_tok_s_1))
      figures.cpu_prefill_tok_s = summarize(pick(r => r.cpu?.prefill_tok_s))
      figures[`cpu_aggregate_tok_s_${maxLevel}`] = summarize(pick(r => level(r.cpu, maxLevel)?.aggregate_tok_s))
    }
    const ratios: Record<string, RoundSummary> = {}
    if (rounds.some(r => r.llama_cpp)) {
      figures.llama_cpp_decode_tok_s_1 = summarize(pick(r => r.llama_cpp?.llama_cpp_decode_tok_s_1))
      figures.llama_cpp_prefill_tok_s = summarize(pick(r => r.llama_cpp?.llama_cpp_prefill_tok_s))
      ratios.decode_1 = summarize(perRoundRatio(pick(r => r.webgpu.decode_tok_s_1), pick(r => r.llama_cpp?.llama_cpp_decode_tok_s_1)))
      if (capture) {
        ratios.decode_1_capture = summarize(perRoundRatio(pick(r => r.webgpu_capture?.decode_tok_s_1), pick(r => r.llama_cpp?.llama_cpp_decode_tok_s_1)))
        ratios[`aggregate_${maxLevel}_capture`] = summarize(perRoundRatio(pick(r => level(r.webgpu_capture, maxLevel)?.aggregate_tok_s), pick(r => r.llama_cpp?.[`llama_cpp_aggregate_tok_s_${maxLevel}`])))
      }
      ratios.prefill = summarize(perRoundRatio(pick(r => r.webgpu.prefill_tok_s), pick(r => r.llama_cpp?.llama_cpp_prefill_tok_s)))
      for (const n of o.levels) {
        figures[`llama_cpp_aggregate_tok_s_${n}`] = summarize(pick(r => r.llama_cpp?.[`llama_cpp_aggregate_tok_s_${n}`]))
        ratios[`aggregate_${n}`] = summarize(perRoundRatio(pick(r => level(r.webgpu, n)?.aggregate_tok_s), pick(r => r.llama_cpp?.[`llama_cpp_aggregate_tok_s_${n}`])))
      }
    }
    for (const [name, turns] of Object.entries(agentTurns)) {
      figures[`${name}_ttft_s_uncached`] = summarize(turns.ttft_s_uncached)
      figures[`${name}_ttft_s_cached`] = summarize(turns.ttft_s_cached)
      figures[`${name}_end_s_uncached`] = summarize(turns.end_s_uncached)
      figures[`${name}_end_s_cached`] = summarize(turns.end_s_cached)
    }
    const med = (key: string): number | null => figures[key]?.median ?? null
    // The capture server's decode tokens since start that replayed the recorded step (its /metrics, after the last round).
    const lastCapture = rounds.at(-1)?.webgpu_capture
    const replayedShare = lastCapture && lastCapture.decode_tokens > 0 ? Math.round(1000 * lastCapture.replayed_tokens / lastCapture.decode_tokens) / 1000 : null
    const firstLlama = rounds.find(r => r.llama_cpp)?.llama_cpp
    // One decode step reads every weight once: the memory's bandwidth over those bytes bounds one stream's rate.
    const bound = Math.round((o.bandwidthGbs * 1e9) / weightBytes)
    const atLeast = (ours: number | null, theirs: number | null): boolean | null => ours === null || theirs === null ? null : ours >= theirs
    const smi = nvidiaSmi()
    const report = {
      date,
      device: 'webgpu',
      gpu: smi ?? (firstLlama?.llama_cpp_vulkan_device || 'unknown (no nvidia-smi, and llama.cpp named no Vulkan device)'),
      vulkan_device: firstLlama?.llama_cpp_vulkan_device ?? null,
      machine: `${process.platform} ${process.arch}, ${os.availableParallelism()} cores, ${os.cpus()[0]?.model ?? 'unknown CPU'}`,
      model: `random int4 (blocks of 32), ${path.basename(o.config ?? 'qwen2-1.5b-shape.config.json', '.config.json')}, Qwen tokenizer; on the GPU the form for GPU hosts (concat cache kept in GPU memory, int4 computed in float), on the CPU the form chatd pull writes (${(weightBytes / 2 ** 30).toFixed(2)} GiB of weights)`,
      server_device: gpuDevice,
      rounds: o.rounds,
      prompt_tokens: rounds[0]?.webgpu.prompt_tokens ?? null,
      generated_tokens: o.gen,
      levels: o.levels,
      webgpu: {
        decode_tok_s_1: med('webgpu_decode_tok_s_1'),
        prefill_tok_s: med('webgpu_prefill_tok_s'),
        ttft_ms: med('webgpu_ttft_ms'),
        aggregate_tok_s: Object.fromEntries(o.levels.map(n => [n, med(`webgpu_aggregate_tok_s_${n}`)])),
      },
      ...(capture ? { webgpu_capture: { positions: capture, rows: maxLevel, replayed_share: replayedShare, decode_tok_s_1: med('webgpu_capture_decode_tok_s_1'), aggregate_tok_s: { [maxLevel]: med(`webgpu_capture_aggregate_tok_s_${maxLevel}`) } } } : {}),
      ...(cpuModel
        ? { cpu: { decode_tok_s_1: med('cpu_decode_tok_s_1'), prefill_tok_s: med('cpu_prefill_tok_s'), aggregate_tok_s: { [maxLevel]: med(`cpu_aggregate_tok_s_${maxLevel}`) } } }
        : {}),
      ...(firstLlama
        ? {
            llama_cpp_vulkan: {
              version: firstLlama.llama_cpp_version,
              source: firstLlama.llama_cpp_source,
              build: firstLlama.llama_cpp_build,
              model: firstLlama.llama_cpp_model,
              decode_tok_s_1: med('llama_cpp_decode_tok_s_1'),
              prefill_tok_s: med('llama_cpp_prefill_tok_s'),
              aggregate_tok_s: Object.fromEntries(o.levels.map(n => [n, med(`llama_cpp_aggregate_tok_s_${n}`)])),
            },
          }
        : { llama_cpp_error: llamaError }),
      agent_turns: Object.fromEntries(Object.entries(agentTurns).map(([name, t]) => [name, {
        prompt_tokens: t.prompt_tokens,
        cached_tokens: t.cached_tokens,
        ttft_s_uncached: med(`${name}_ttft_s_uncached`),
        ttft_s_cached: med(`${name}_ttft_s_cached`),
        end_s_uncached: med(`${name}_end_s_uncached`),
        end_s_cached: med(`${name}_end_s_cached`),
      }])),
      physical_bound: {
        bandwidth_gbs: o.bandwidthGbs,
        weight_bytes: weightBytes,
        decode_tok_s_1: bound,
        note: `one stream's decode cannot pass ${bound} tok/s: each step reads ${(weightBytes / 2 ** 30).toFixed(2)} GiB of weights at ${o.bandwidthGbs} GB/s (--bandwidth-gbs; 3350 is an H100 SXM's HBM3)`,
      },
      targets: {
        decode_1_at_least_llama_cpp: atLeast(med('webgpu_decode_tok_s_1'), med('llama_cpp_decode_tok_s_1')),
        ...(capture
          ? {
              decode_1_with_capture_at_least_llama_cpp: atLeast(med('webgpu_capture_decode_tok_s_1'), med('llama_cpp_decode_tok_s_1')),
              [`aggregate_${maxLevel}_with_capture_at_least_llama_cpp`]: atLeast(med(`webgpu_capture_aggregate_tok_s_${maxLevel}`), med(`llama_cpp_aggregate_tok_s_${maxLevel}`)),
            }
          : {}),
        prefill_at_least_llama_cpp: atLeast(med('webgpu_prefill_tok_s'), med('llama_cpp_prefill_tok_s')),
        [`aggregate_${maxLevel}_at_least_llama_cpp`]: atLeast(med(`webgpu_aggregate_tok_s_${maxLevel}`), med(`llama_cpp_aggregate_tok_s_${maxLevel}`)),
        codex_first_token_under_2_s_uncached: agentTurns.codex ? (med('codex_ttft_s_uncached') ?? Infinity) < 2 : null,
      },
      figures,
      ratios,
      round_data: rounds,
    }
    return { report: { ...(partial ? { partial: true } : {}), ...report }, figures, ratios, firstLlama }
  }
  const jsonPath = o.json ?? path.join(o.out, 'bench-webgpu.json')
  const save = (partial: boolean) => {
    const built = build(partial)
    fs.mkdirSync(path.dirname(jsonPath), { recursive: true })
    fs.writeFileSync(jsonPath, JSON.stringify(built.report, null, 2) + '\n')
    return built
  }

  // ---- the servers --------------------------------------------------------------
  const env = { ONNX_THREADS: String(o.threads), MAX_BATCH: String(maxLevel), PREFIX_CACHE: '0' }
  const servers: ChatdServer[] = []
  const start = async (name: string, modelDir: string, device: string, extra: Record<string, string> = {}): Promise<ChatdServer> => {
    log(`starting chatd (${name}: ONNX_DEVICE=${device}) ...`)
    const server = await startChatdServer({ root: o.root, out: o.out, modelDir, dtype: 'q4', env: { ...env, ONNX_DEVICE: device, ...extra }, name })
    servers.push(server)
    // Warm-up: the first runs compile shaders, allocate buffers and pre-pack weights.
    await oneStream(server.client, content, 8)
    return server
  }
  try {
    const gpu = await start('webgpu', gpuModel, 'webgpu')
    gpuDevice = await deviceOf(gpu.client)
    if (gpuDevice.device !== 'webgpu') throw new Error(`the GPU server runs on ${String(gpuDevice.device)}, not webgpu`)
    const cpu = cpuModel ? await start('cpu', cpuModel, 'cpu') : null
    const captured = capture ? await start('webgpu-capture', gpuModel, 'webgpu', { ONNX_WEBGPU_CAPTURE: String(capture), ONNX_WEBGPU_CAPTURE_ROWS: String(maxLevel) }) : null
    for (let r = 0; r < o.rounds; r++) {
      log(`round ${r + 1}/${o.rounds}`)
      let llamaRound: LlamaCppReport | undefined
      if (llama) {
        try {
          llamaRound = measureLlamaCpp(llama, { prompt: o.prompt, gen: o.gen, levels: o.levels, reps: 2, log })
        } catch (err) {
          llamaError = `failed in round ${r + 1}: ${(err as Error).message}`
          log(`llama.cpp (Vulkan) ${llamaError}`)
        }
      }
      log('chatd on WebGPU ...')
      const webgpu = await measureHttpRound(gpu.client, { content, gen: o.gen, levels: o.levels, log })
      log(`  decode ${webgpu.decode_tok_s_1.toFixed(1)} tok/s, prefill ${webgpu.prefill_tok_s.toFixed(0)} tok/s`)
      let captureRound: Round['webgpu_capture']
      if (captured) {
        log(`chatd on WebGPU, ONNX_WEBGPU_CAPTURE=${capture}, ONNX_WEBGPU_CAPTURE_ROWS=${maxLevel} ...`)
        const measured = await measureHttpRound(captured.client, { content, gen: o.gen, levels: [...new Set([1, maxLevel])], log })
        // Whether the decoding did replay: a row past the step's positions or rows takes the usual steps.
        captureRound = { ...measured, replayed_tokens: await captured.metric('chatd_engine_replayed_tokens_total'), decode_tokens: await captured.metric('chatd_engine_step_tokens_total', 'kind="decode"') }
        log(`  decode ${captureRound.decode_tok_s_1.toFixed(1)} tok/s; ${captureRound.replayed_tokens} of ${captureRound.decode_tokens} decode tokens since start replayed`)
      }
      let cpuRound: HttpRound | undefined
      if (cpu) {
        log('chatd on the CPU ...')
        cpuRound = await measureHttpRound(cpu.client, { content, gen: o.gen, levels: [...new Set([1, maxLevel])], log })
      }
      rounds.push({ webgpu, ...(captureRound ? { webgpu_capture: captureRound } : {}), ...(cpuRound ? { cpu: cpuRound } : {}), ...(llamaRound ? { llama_cpp: llamaRound } : {}) })
      save(true)
    }
    for (const server of servers.splice(0)) await server.stop()

    if (o.agentTurns) {
      // Their own server, with the prefix cache on: the second turn of each pair finds the instructions cached.
      const agent = await start('webgpu-agent', gpuModel, 'webgpu', { PREFIX_CACHE: '1' })
      for (const [name, turn] of Object.entries(AGENTS)) {
        const uncached: Turn[] = []
        const cached: Turn[] = []
        for (let r = 0; r < o.rounds; r++) {
          const marker = String.fromCharCode(65 + r + (name === 'codex' ? 0 : 16)) // a first character no earlier round used
          uncached.push(await turn(agent, marker, `Round ${r}: list the files here.`))
          cached.push(await turn(agent, marker, `Round ${r}: now show me the README.`))
          log(`${name} round ${r + 1}: uncached ${uncached.at(-1)!.ttftMs.toFixed(0)} ms, cached ${cached.at(-1)!.ttftMs.toFixed(0)} ms (${uncached.at(-1)!.inputTokens} prompt tokens)`)
        }
        agentTurns[name] = {
          prompt_tokens: uncached[0].inputTokens,
          cached_tokens: median(cached.map(t => t.cachedTokens)),
          ttft_s_uncached: uncached.map(t => t.ttftMs / 1000),
          ttft_s_cached: cached.map(t => t.ttftMs / 1000),
          end_s_uncached: uncached.map(t => t.endMs / 1000),
          end_s_cached: cached.map(t => t.endMs / 1000),
        }
        save(true)
      }
    }
  } finally {
    for (const server of servers) await server.stop()
  }

  const { report, figures, ratios, firstLlama } = save(false)
  const f = (key: string): string => formatSummary(figures[key] ?? summarize([]))
  const q = (key: string): string => formatSummary(ratios[key] ?? summarize([]))
  console.log(`\nchatd on WebGPU: ${report.model}`)
  console.log(`GPU: ${report.gpu}${report.vulkan_device ? ` (llama.cpp's Vulkan device: ${report.vulkan_device})` : ''}; ${report.machine}; ${date}`)
  console.log(`server: ${JSON.stringify(gpuDevice)}`)
  console.log(`prompt ${report.prompt_tokens} tokens, ${o.gen} generated, greedy; ${o.rounds} round(s), medians (min-max)\n`)
  console.log('| tok/s | chatd, WebGPU | llama.cpp, Vulkan | chatd / llama.cpp |' + (cpuModel ? ' chatd, CPU |' : ''))
  console.log('|---|---:|---:|---:|' + (cpuModel ? '---:|' : ''))
  console.log(`| decode, 1 stream | ${f('webgpu_decode_tok_s_1')} | ${f('llama_cpp_decode_tok_s_1')} | ${q('decode_1')} |` + (cpuModel ? ` ${f('cpu_decode_tok_s_1')} |` : ''))
  if (capture) console.log(`| decode, 1 stream, the step replayed (ONNX_WEBGPU_CAPTURE=${capture}, _ROWS=${maxLevel}) | ${f('webgpu_capture_decode_tok_s_1')} | ${f('llama_cpp_decode_tok_s_1')} | ${q('decode_1_capture')} |` + (cpuModel ? ' |' : ''))
  console.log(`| prefill, ${report.prompt_tokens} tokens | ${f('webgpu_prefill_tok_s')} | ${f('llama_cpp_prefill_tok_s')} | ${q('prefill')} |` + (cpuModel ? ` ${f('cpu_prefill_tok_s')} |` : ''))
  for (const n of o.levels) {
    console.log(`| aggregate, ${n} stream${n === 1 ? '' : 's'} | ${f(`webgpu_aggregate_tok_s_${n}`)} | ${f(`llama_cpp_aggregate_tok_s_${n}`)} | ${q(`aggregate_${n}`)} |` + (cpuModel ? ` ${n === maxLevel ? f(`cpu_aggregate_tok_s_${n}`) : ''} |` : ''))
  }
  if (capture && maxLevel > 1) console.log(`| aggregate, ${maxLevel} streams, the step replayed | ${f(`webgpu_capture_aggregate_tok_s_${maxLevel}`)} | ${f(`llama_cpp_aggregate_tok_s_${maxLevel}`)} | ${q(`aggregate_${maxLevel}_capture`)} |` + (cpuModel ? ' |' : ''))
  if (!firstLlama) console.log(`\nllama.cpp (Vulkan): ${llamaError}`)
  for (const [name, t] of Object.entries(agentTurns)) {
    console.log(`\n${name} turn (${t.prompt_tokens} prompt tokens): first token ${f(`${name}_ttft_s_uncached`)} s with nothing cached, ${f(`${name}_ttft_s_cached`)} s with ${t.cached_tokens} cached`)
  }
  console.log(`\nphysical bound: ${report.physical_bound.note}`)
  console.log(`targets: ${JSON.stringify(report.targets)}`)
  console.log(`\nwrote ${path.relative(process.cwd(), jsonPath)}`)
  return report
}
