// The serving families under vLLM's names, buckets and `model_name` label
// (vllm/v1/metrics/loggers.py), so the Grafana dashboards and alerts written
// for vLLM read chatd unchanged. Their prefix is `vllm:` by default, or
// `chatd:` (METRICS_FAMILY_PREFIX) for a Prometheus that scrapes vLLM too and
// must tell them apart; the suffixes stay vLLM's either way. Beside them,
// chatd's own engine and upstream figures, under `chatd_` with `model_name`.
//
// What is measured where: the request histograms, token counters and finish
// reasons come from observe.ts, the one place every door's generation passes
// through; the scheduler's gauges, the prefix cache counters and the step
// figures come from each local engine's own reports, read at scrape time.

import { Counter, Gauge, Histogram, type Registry } from 'prom-client'
import type { FamilyPrefix } from '../../config.ts'
import type { EngineStats, StepKind } from '../../engine/backend.ts'

/** vLLM's time to first token buckets. */
const TTFT_BUCKETS = [0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0]
/** vLLM's inter-token latency buckets (also its per-request time per output token). */
const ITL_BUCKETS = [0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0]
/** vLLM's request latency buckets (e2e, queue, prefill, decode, inference). */
const REQUEST_LATENCY_BUCKETS = [0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0]
/** vLLM's tokens-per-step buckets. */
const ITERATION_TOKEN_BUCKETS = [1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384]

/**
 * vLLM's 1-2-5 token buckets up to the model's length (build_1_2_5_buckets). One registry serves
 * every model, so they go up to a million tokens, past any context chatd serves.
 */
export function oneTwoFiveBuckets (max = 1_000_000): number[] {
  const buckets: number[] = []
  for (let base = 1; base <= max; base *= 10) {
    for (const m of [1, 2, 5]) if (base * m <= max) buckets.push(base * m)
  }
  return buckets
}

/** vLLM's finished_reason for a chatd finish: a client that went away is vLLM's `abort`; a generation that failed, `error`. */
export type FinishedReason = 'stop' | 'length' | 'tool_calls' | 'abort' | 'error'

/** What a local engine reports, read at scrape time. */
export interface EngineStatsReading {
  model: string
  stats?: EngineStats
}

const STEP_KINDS: StepKind[] = ['prefill', 'decode', 'mixed']

export class ServingMetrics {
  readonly prefix: FamilyPrefix
  /** Every registered model (for the gauges of models without an engine of their own). */
  #models: () => string[] = () => []
  #engines: () => EngineStatsReading[] = () => []
  /** Requests each model is answering right now, as the pipeline counts them (upstream models' running requests). */
  readonly #inFlight = new Map<string, number>()

  readonly running: Gauge<'model_name'>
  readonly waiting: Gauge<'model_name'>
  readonly kvCacheUsage: Gauge<'model_name'>
  readonly prefixCacheQueries: Counter<'model_name'>
  readonly prefixCacheHits: Counter<'model_name'>
  readonly promptTokens: Counter<'model_name'>
  readonly generationTokens: Counter<'model_name'>
  readonly requestSuccess: Counter<'model_name' | 'finished_reason'>
  readonly admissionRejections: Counter<'model_name' | 'reason'>
  readonly timeToFirstToken: Histogram<'model_name'>
  readonly interTokenLatency: Histogram<'model_name'>
  readonly requestTimePerOutputToken: Histogram<'model_name'>
  readonly e2eLatency: Histogram<'model_name'>
  readonly queueTime: Histogram<'model_name'>
  readonly inferenceTime: Histogram<'model_name'>
  readonly prefillTime: Histogram<'model_name'>
  readonly decodeTime: Histogram<'model_name'>
  readonly requestPromptTokens: Histogram<'model_name'>
  readonly requestGenerationTokens: Histogram<'model_name'>
  readonly iterationTokens: Histogram<'model_name'>
  readonly engineSteps: Counter<'model_name' | 'kind'>
  readonly engineStepTokens: Counter<'model_name' | 'kind'>
  readonly engineReplayedTokens: Counter<'model_name'>
  readonly prefixCacheKept: Gauge<'model_name'>
  readonly upstreamResponse: Histogram<'model_name'>

  constructor (registry: Registry, prefix: FamilyPrefix = 'vllm:') {
    this.prefix = prefix
    const registers = [registry]
    const labelNames = ['model_name'] as const
    const p = prefix

    this.running = new Gauge({
      name: `${p}num_requests_running`,
      help: 'Requests being computed right now: a local engine\'s sequences in prompt processing or decoding; for an upstream model, the requests chatd has sent it and not yet seen end.',
      labelNames,
      registers,
      collect: () => this.#scheduler(this.running, stats => stats.running, model => this.#inFlight.get(model) ?? 0),
    })
    this.waiting = new Gauge({
      name: `${p}num_requests_waiting`,
      help: 'Requests a local engine holds in its queue, not yet started (0 for upstream models: chatd sends them on at once).',
      labelNames,
      registers,
      collect: () => this.#scheduler(this.waiting, stats => stats.waiting, () => 0),
    })
    this.kvCacheUsage = new Gauge({
      name: `${p}kv_cache_usage_perc`,
      help: 'Share of a local engine\'s KV cache budget (KV_CACHE_MB) held for running sequences, as admission counts it (each row padded to the longest reservation); 1 means full. Kept prefix caches, which give way, are chatd_prefix_cache_usage_perc.',
      labelNames,
      registers,
      collect: () => this.#fromEngines(this.kvCacheUsage, stats => stats.kvUsage),
    })
    this.prefixCacheQueries = new Counter({
      name: `${p}prefix_cache_queries_total`,
      help: 'Prompt tokens a local engine looked up in its prefix cache (every prompt it started with the prefix cache on, but seeded ones), in tokens.',
      labelNames,
      registers,
      collect: () => this.#mirror(this.prefixCacheQueries, stats => stats.prefixQueries),
    })
    this.prefixCacheHits = new Counter({
      name: `${p}prefix_cache_hits_total`,
      help: 'Prompt tokens a local engine found in its prefix cache and did not compute (the hit rate is hits over queries).',
      labelNames,
      registers,
      collect: () => this.#mirror(this.prefixCacheHits, stats => stats.prefixHits),
    })
    this.promptTokens = new Counter({ name: `${p}prompt_tokens_total`, help: 'Prompt tokens of requests that ended (as their usage counts them, cached ones included).', labelNames, registers })
    this.generationTokens = new Counter({ name: `${p}generation_tokens_total`, help: 'Tokens generated for requests that ended (thinking included).', labelNames, registers })
    this.requestSuccess = new Counter({
      name: `${p}request_success_total`,
      help: 'Requests that ended after their generation started, by finished_reason: `stop`, `length`, `tool_calls`, `abort` (the client went away, or the shutdown\'s grace ended) or `error` (the generation failed).',
      labelNames: ['model_name', 'finished_reason'] as const,
      registers,
    })
    this.admissionRejections = new Counter({
      name: `${p}admission_rejections_total`,
      help: 'Requests for a configured model refused before any output, by chatd\'s checks or by the model itself, by reason (the error code: `server_overloaded` for a full queue (QUEUE_SIZE), `rate_limit_exceeded`, `allowance_exhausted`, `invalid_parameter`, `context_length_exceeded`, ...).',
      labelNames: ['model_name', 'reason'] as const,
      registers,
    })
    this.timeToFirstToken = new Histogram({ name: `${p}time_to_first_token_seconds`, help: 'Time from the request\'s checks starting to its first generated text, tool call or thinking, in seconds.', labelNames, registers, buckets: TTFT_BUCKETS })
    this.interTokenLatency = new Histogram({ name: `${p}inter_token_latency_seconds`, help: 'Time between one piece of generated output and the next as chatd receives them from the model, in seconds (a local engine sends one decode step\'s text at a time; an upstream, its own chunks).', labelNames, registers, buckets: ITL_BUCKETS })
    this.requestTimePerOutputToken = new Histogram({ name: `${p}request_time_per_output_token_seconds`, help: 'Per request with more than one generated token: the time from its first output to its last, over the tokens after the first, in seconds.', labelNames, registers, buckets: ITL_BUCKETS })
    this.e2eLatency = new Histogram({ name: `${p}e2e_request_latency_seconds`, help: 'Time from the request\'s checks starting to its generation\'s end (every finished_reason), in seconds.', labelNames, registers, buckets: REQUEST_LATENCY_BUCKETS })
    this.queueTime = new Histogram({ name: `${p}request_queue_time_seconds`, help: 'Local engine: time a request waited in the engine\'s queue before its prompt started, in seconds (per call of the engine: a request in rounds counts each).', labelNames, registers, buckets: REQUEST_LATENCY_BUCKETS })
    this.inferenceTime = new Histogram({ name: `${p}request_inference_time_seconds`, help: 'Local engine: time from a request\'s prompt starting to its last token, in seconds.', labelNames, registers, buckets: REQUEST_LATENCY_BUCKETS })
    this.prefillTime = new Histogram({ name: `${p}request_prefill_time_seconds`, help: 'Local engine: time from a request\'s prompt starting to its first token, in seconds.', labelNames, registers, buckets: REQUEST_LATENCY_BUCKETS })
    this.decodeTime = new Histogram({ name: `${p}request_decode_time_seconds`, help: 'Local engine: time from a request\'s first token to its last, in seconds.', labelNames, registers, buckets: REQUEST_LATENCY_BUCKETS })
    this.requestPromptTokens = new Histogram({ name: `${p}request_prompt_tokens`, help: 'Prompt tokens per request that ended.', labelNames, registers, buckets: oneTwoFiveBuckets() })
    this.requestGenerationTokens = new Histogram({ name: `${p}request_generation_tokens`, help: 'Generated tokens per request that ended.', labelNames, registers, buckets: oneTwoFiveBuckets() })
    this.iterationTokens = new Histogram({ name: `${p}iteration_tokens_total`, help: 'Tokens a local engine fed per run of the model (an engine step: prompt tokens and one token per decoding row).', labelNames, registers, buckets: ITERATION_TOKEN_BUCKETS })

    this.engineSteps = new Counter({
      name: 'chatd_engine_steps_total',
      help: 'Runs of a local model for requests (engine steps) since start, by kind: `prefill` (prompt chunks alone), `decode` (decode steps alone), `mixed` (prompt chunks inside decode steps, MIXED_BATCHES). Next turns computed ahead while idle are counted in chatd_prompt_tokens_computed_ahead_total instead.',
      labelNames: ['model_name', 'kind'] as const,
      registers,
      collect: () => this.#mirrorSteps(this.engineSteps, stats => stats.steps),
    })
    this.engineStepTokens = new Counter({
      name: 'chatd_engine_step_tokens_total',
      help: 'Tokens those runs fed, by kind (over chatd_engine_steps_total: tokens per step).',
      labelNames: ['model_name', 'kind'] as const,
      registers,
      collect: () => this.#mirrorSteps(this.engineStepTokens, stats => stats.stepTokens),
    })
    this.engineReplayedTokens = new Counter({
      name: 'chatd_engine_replayed_tokens_total',
      help: 'Tokens a local model decoded on its capture step since start (ONNX_WEBGPU_CAPTURE: the recorded step replayed, without the host\'s dispatch of every kernel); over chatd_engine_step_tokens_total{kind="decode"}: the share of decoding that replays. 0 without capture.',
      labelNames,
      registers,
      collect: () => this.#mirror(this.engineReplayedTokens, stats => stats.replayedTokens),
    })
    this.prefixCacheKept = new Gauge({
      name: 'chatd_prefix_cache_usage_perc',
      help: 'Share of a local engine\'s KV cache budget that finished requests\' kept caches (the prefix cache, at most PREFIX_CACHE_MB) hold; they give way to running sequences.',
      labelNames,
      registers,
      collect: () => this.#fromEngines(this.prefixCacheKept, stats => stats.prefixCacheUsage),
    })
    this.upstreamResponse = new Histogram({
      name: 'chatd_upstream_response_seconds',
      help: 'Upstream models: time from chatd sending a request to the upstream to its status line (retries included), in seconds.',
      labelNames,
      registers,
      buckets: TTFT_BUCKETS,
    })
  }

  /** Where the scheduler gauges and engine counters read from: the registry's models and their engines. */
  watch (models: () => string[], engines: () => EngineStatsReading[]): void {
    this.#models = models
    this.#engines = engines
  }

  /** A request for `model` is being answered (+1) or has ended (-1). */
  inFlight (model: string, delta: 1 | -1): void {
    this.#inFlight.set(model, (this.#inFlight.get(model) ?? 0) + delta)
  }

  /** Observes each engine step's tokens, as a local engine reports them. */
  steps (model: string, tokens: number[]): void {
    const labels = { model_name: model }
    for (const n of tokens) this.iterationTokens.observe(labels, n)
  }

  /** A gauge per model: an engine's figure for a local model, `other` for the rest. */
  #scheduler (gauge: Gauge<'model_name'>, fromEngine: (stats: EngineStats) => number, other: (model: string) => number): void {
    gauge.reset()
    const engines = new Map(this.#engines().map(e => [e.model, e.stats]))
    const models = new Set([...this.#models(), ...this.#inFlight.keys()])
    for (const model of models) {
      const stats = engines.get(model)
      gauge.set({ model_name: model }, engines.has(model) ? (stats ? fromEngine(stats) : 0) : other(model))
    }
  }

  #fromEngines (gauge: Gauge<'model_name'>, read: (stats: EngineStats) => number): void {
    gauge.reset()
    for (const { model, stats } of this.#engines()) gauge.set({ model_name: model }, stats ? read(stats) : 0)
  }

  /** A counter the engines keep, mirrored at scrape time. */
  #mirror (counter: Counter<'model_name'>, read: (stats: EngineStats) => number): void {
    counter.reset()
    for (const { model, stats } of this.#engines()) counter.inc({ model_name: model }, stats ? read(stats) : 0)
  }

  #mirrorSteps (counter: Counter<'model_name' | 'kind'>, read: (stats: EngineStats) => Record<StepKind, number>): void {
    counter.reset()
    for (const { model, stats } of this.#engines()) {
      for (const kind of STEP_KINDS) counter.inc({ model_name: model, kind }, stats ? read(stats)[kind] : 0)
    }
  }
}
