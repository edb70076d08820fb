// The Prometheus metrics chatd exposes. Each app builds its own prom-client
// Registry (not the global one), so several apps in one process, as in tests,
// never share or double-register counters.
//
// Three sets: chatd's own `chatd_*` families below (labelled `model`, as they
// always were); the serving families under vLLM's names (serving.ts) and the
// OpenTelemetry GenAI histograms (gen-ai.ts), labelled `model_name`; and, with
// METRICS_ACCOUNTS_TOP, the per-account families (accounts.ts).
// docs/operations.md lists every one (scripts/docs-metrics.ts writes the table
// from this registry).

import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from 'prom-client'
import type { EngineStats, GrammarCounts } from '../../engine/backend.ts'
import { AccountMetrics } from './accounts.ts'
import { GenAiMetrics } from './gen-ai.ts'
import type { FamilyPrefix } from '../../config.ts'
import { ServingMetrics } from './serving.ts'

/** What a local engine reports at scrape time. */
export interface EngineReading {
  model: string
  sequences: number
  /** The execution provider the engine runs on, once loaded. */
  device?: string
  computedAhead?: number
  grammar?: GrammarCounts
  /** The engine's latest report of its load and counts. */
  stats?: EngineStats
}

export interface MetricsOptions {
  /** METRICS_FAMILY_PREFIX: the serving families' prefix (`vllm:` by default). */
  familyPrefix?: FamilyPrefix
  /** METRICS_ACCOUNTS_TOP: accounts with series of their own; 0 (default): no per-account families. */
  accountsTop?: number
  /** The per-account window's clock (tests). */
  now?: () => number
}

export class Metrics {
  readonly registry = new Registry()
  /** vLLM's serving families (serving.ts). */
  readonly serving: ServingMetrics
  /** The OpenTelemetry GenAI server histograms (gen-ai.ts). */
  readonly genAi: GenAiMetrics
  /** Per-account figures, present with METRICS_ACCOUNTS_TOP (accounts.ts). */
  readonly accounts: AccountMetrics | undefined

  readonly httpRequests = new Counter({
    name: 'chatd_http_requests_total',
    help: 'HTTP requests answered, by route pattern, method and status code.',
    labelNames: ['route', 'method', 'status'] as const,
    registers: [this.registry],
  })

  readonly errors = new Counter({
    name: 'chatd_errors_total',
    help: 'API errors returned (as a status or as a mid-stream error event), by error code.',
    labelNames: ['code'] as const,
    registers: [this.registry],
  })

  readonly timeToFirstToken = new Histogram({
    name: 'chatd_time_to_first_token_seconds',
    help: 'Time from receiving a chat completion request to its first generated text.',
    labelNames: ['model'] as const,
    buckets: [0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60],
    registers: [this.registry],
  })

  readonly generatedTokens = new Counter({
    name: 'chatd_generated_tokens_total',
    help: 'Completion tokens generated, by model.',
    labelNames: ['model'] as const,
    registers: [this.registry],
  })

  readonly promptTokens = new Counter({
    name: 'chatd_prompt_tokens_total',
    help: 'Prompt tokens processed, by model.',
    labelNames: ['model'] as const,
    registers: [this.registry],
  })

  readonly cachedPromptTokens = new Counter({
    name: 'chatd_prompt_tokens_cached_total',
    help: 'Prompt tokens served from a prefix cache instead of computed, as the model reports them (the local engine; upstreams that send prompt_tokens_details), by model; part of chatd_prompt_tokens_total.',
    labelNames: ['model'] as const,
    registers: [this.registry],
  })

  readonly activeRequests = new Gauge({
    name: 'chatd_active_requests',
    help: 'Chat completions being generated right now, by model.',
    labelNames: ['model'] as const,
    registers: [this.registry],
  })

  readonly completions = new Counter({
    name: 'chatd_completions_total',
    help: 'Chat completions that ended, by model and finish reason (cancelled: the client went away).',
    labelNames: ['model', 'finish_reason'] as const,
    registers: [this.registry],
  })

  readonly queueLength = new Gauge({
    name: 'chatd_queue_length',
    help: 'Chat completions admitted but still waiting for their first event from the model (queued or in prompt processing), by model.',
    labelNames: ['model'] as const,
    registers: [this.registry],
  })

  /** Reads each local engine's sequences at scrape time; set by watchEngines. */
  #engines: () => EngineReading[] = () => []

  readonly engineSequences = new Gauge({
    name: 'chatd_engine_sequences',
    help: 'Sequences a local model\'s engine holds (waiting, in prompt processing or decoding, or cancelled and not yet stopped), by model. Back to 0 when a disconnected client\'s generation has really stopped.',
    labelNames: ['model'] as const,
    registers: [this.registry],
    collect: () => {
      this.engineSequences.reset()
      for (const { model, sequences } of this.#engines()) this.engineSequences.set({ model }, sequences)
    },
  })

  readonly modelDevice = new Gauge({
    name: 'chatd_model_device',
    help: 'The execution provider a loaded local model runs on: 1 for its device (cpu, cuda or webgpu), by model and device.',
    labelNames: ['model', 'device'] as const,
    registers: [this.registry],
    collect: () => {
      this.modelDevice.reset()
      for (const { model, device } of this.#engines()) if (device) this.modelDevice.set({ model, device }, 1)
    },
  })

  readonly promptTokensComputedAhead = new Counter({
    name: 'chatd_prompt_tokens_computed_ahead_total',
    help: 'Prompt positions a local model\'s engine computed while idle for conversations\' next turns (each reply followed by the conversation as the next turn will start), since start, by model. A later turn that finds them counts them in chatd_prompt_tokens_cached_total.',
    labelNames: ['model'] as const,
    registers: [this.registry],
    collect: () => {
      this.promptTokensComputedAhead.reset()
      // A counter the engines keep: mirrored at scrape time.
      for (const { model, computedAhead } of this.#engines()) if (computedAhead !== undefined) this.promptTokensComputedAhead.inc({ model }, computedAhead)
    },
  })

  readonly grammarCompiles = new Counter({
    name: 'chatd_grammar_compiles_total',
    help: 'New JSON response_format schemas a local model compiled, by model and outcome, since start: `started` (each in a worker of its own), `timed_out` (GRAMMAR_COMPILE_TIMEOUT_MS), `failed` (the grammar engine refused or crashed on it), `cancelled` (the client left), `busy` (refused: too many compiles in flight). Schemas an account already used are cached and not counted.',
    labelNames: ['model', 'outcome'] as const,
    registers: [this.registry],
    collect: () => {
      this.grammarCompiles.reset()
      for (const { model, grammar } of this.#engines()) {
        if (!grammar) continue
        this.grammarCompiles.inc({ model, outcome: 'started' }, grammar.compiles)
        this.grammarCompiles.inc({ model, outcome: 'timed_out' }, grammar.timedOut)
        this.grammarCompiles.inc({ model, outcome: 'failed' }, grammar.failed)
        this.grammarCompiles.inc({ model, outcome: 'cancelled' }, grammar.cancelled)
        this.grammarCompiles.inc({ model, outcome: 'busy' }, grammar.busy)
      }
    },
  })

  readonly grammarCompilesInFlight = new Gauge({
    name: 'chatd_grammar_compiles_in_flight',
    help: 'New JSON response_format schemas compiling right now, by model (at most GRAMMAR_COMPILES_MAX).',
    labelNames: ['model'] as const,
    registers: [this.registry],
    collect: () => {
      this.grammarCompilesInFlight.reset()
      for (const { model, grammar } of this.#engines()) if (grammar) this.grammarCompilesInFlight.set({ model }, grammar.inFlight)
    },
  })

  /**
   * Where the engine figures read from (the registry's local backends); `models`: every registered
   * model, for the scheduler gauges of models without an engine.
   */
  watchEngines (read: () => EngineReading[], models: () => string[] = () => []): void {
    this.#engines = read
    this.serving.watch(models, read)
  }

  constructor (opts: MetricsOptions = {}) {
    collectDefaultMetrics({ register: this.registry, prefix: 'chatd_' })
    this.serving = new ServingMetrics(this.registry, opts.familyPrefix)
    this.genAi = new GenAiMetrics(this.registry)
    this.accounts = opts.accountsTop ? new AccountMetrics(this.registry, { top: opts.accountsTop, now: opts.now }) : undefined
  }
}
