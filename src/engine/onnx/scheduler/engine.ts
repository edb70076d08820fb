// The local engine, in whichever thread hosts it: a loaded decoder and the
// scheduler loop over the sequences its requests become (a request's way in,
// its prompt and its checks and constraints, is intake.ts's).
//
// Scheduling (continuous batching): sequences that are generating share one
// batched session.run per decode step; new requests' prompts are fed in
// chunks between those steps (several waiting prompts together, one run per
// chunk: prefill-group.ts), so they never freeze the others for their whole
// length, and each joins the batch as soon as its first token is out. With a
// graph that packs rows (chatd's own), a prompt that starts while others
// decode joins their batch at once instead and is fed a chunk per decode
// step, inside the same run (mixed batches: one pass over the weights feeds
// both; decode-batch.ts). Finished
// and cancelled sequences leave between steps. The loop yields to the event
// loop after every run, so cancellations and new requests are seen within
// one step.
//
// Graphs built around com.microsoft GroupQueryAttention, and graphs without a
// position_ids input, derive positions themselves and cannot take padded
// rows; for them every sequence decodes in a batch of its own, taking turns.
// chatd's gqa-masked graphs (the GPU form) take padded rows and decode in
// batches, but prefill one prompt per run (onnxruntime's GroupQueryAttention
// takes a several-token run on a cached past for one row only), but for
// bursts: prompts cached but for their last token, and prompts fed whole in
// one run on an empty cache (#prefillPlan).
import { randomUUID } from 'node:crypto'
import { setImmediate as yieldToEventLoop, setTimeout as sleep } from 'node:timers/promises'
import { wallClock, type ChatMessage, type DeltaLogprobs, type FinishReason, type GenerateRequest, type GenerateTimings, type Usage } from '../../backend.ts'
import { ApiError } from '../../../errors.ts'
import type { EncodedPrompt } from '../text/chat-prompt.ts'
import { ChatTemplate } from '../text/chat-template.ts'
import { DecodeBatch } from './decode-batch.ts'
import { PrefillGroup, promptRoom } from './prefill-group.ts'
import { PrefillPacer } from './prefill-pacer.ts'
import type { CapturedStep } from '../device/captured-step.ts'
import { DecoderSession, usesGroupQueryAttention } from '../device/decoder-session.ts'
import { GrammarClient } from '../grammar/grammar-client.ts'
import { TokenTable } from '../text/token-bytes.ts'
import { defaultKeptBytes, defaultKvCacheBytes, KvBudget, kvBytesPerToken, SLOT_SLACK } from '../cache/kv-budget.ts'
import { cacheLayoutFor, type CacheLayout, type RowCache } from '../cache/kv-cache.ts'
import { CacheManager, type PrefixMatch, type Reservation } from '../cache/cache-manager.ts'
import { sharedPrefixIds, type SharedPrefix } from '../cache/shared-prefix.ts'
import { AHEAD_CHUNK, computeAhead, NextTurns, nextTurnIds, type PendingTurn } from '../cache/next-turn.ts'
import { CAPTURE_STEP_FILE, ModelDirError, readModelDir, type ModelDir, type ModelDtype } from '../model-dir.ts'
import type { DeviceChoice } from '../device/providers.ts'
import { DEFAULT_SCHEDULER, type SchedulerSettings } from './scheduler-settings.ts'
import { EngineCounters, type EngineLoad, type StatsReport } from './engine-stats.ts'
import { RequestIntake } from './intake.ts'
import type { Sequence, StepResult } from './sequence.ts'
import { loadTokenizer, type TextTokenizer } from '../text/tokenizer.ts'

export interface EngineEvents {
  delta (id: string, text: { content: string; reasoning: string; logprobs?: DeltaLogprobs }): void
  /** `stopSequence`: the request's stop string that ended it, if one did; `timings`: when it queued, started, and sampled its tokens. */
  finish (id: string, reason: FinishReason, usage: Usage, stopSequence?: string, timings?: GenerateTimings): void
  error (id: string, error: ApiError): void
  /** Prompt positions were computed ahead for a conversation's next turn (next-turn.ts). */
  computedAhead? (positions: number): void
  /** The engine's counts and load, for the metrics (engine-stats.ts says when). */
  stats? (report: StatsReport): void
}

export interface EngineSettings extends Partial<SchedulerSettings> {
  modelDir: string
  dtype: ModelDtype
  device: DeviceChoice
  /** Who asked for the device, for its errors (SessionSettings.deviceFrom). */
  deviceFrom?: string
  threads: number
  /** models.json `contextLength`: lowers the model's own context length. */
  contextLength?: number
  /** Memory for the KV cache in bytes (KV_CACHE_MB); 0 or absent: defaultKvCacheBytes(). */
  kvCacheBytes?: number
  /** Keep sequences' caches for later requests that start the same way (PREFIX_CACHE); default true. */
  prefixCache?: boolean
  /** Bytes the kept caches may hold in all (PREFIX_CACHE_MB), within the KV budget; 0 or absent: defaultKeptBytes(). */
  prefixCacheBytes?: number
  /** A system prompt whose cache every cache scope may reuse (PREFIX_CACHE_SHARED_PREFIX); none when absent. */
  sharedPrefix?: SharedPrefix
  /** Feed newcomers' prompts inside the decode steps of the others (MIXED_BATCHES), where the graph packs rows; default true. */
  mixedBatches?: boolean
  /** Run prompts on the model's int8 prompt graph where it has one, on the CPU (PROMPT_GRAPH); default true. */
  promptGraph?: boolean
  /**
   * On the WebGPU device: requests decoding take their steps on the model's capture step
   * (onnx/model_step.onnx), recorded once and replayed, each one's cache there this many
   * positions long (ONNX_WEBGPU_CAPTURE); 0 or absent: off.
   */
  webgpuCapture?: number
  /** Requests decoding together the capture step takes (ONNX_WEBGPU_CAPTURE_ROWS, within maxBatch); default 1. */
  webgpuCaptureRows?: number
}

/** Prompt tokens per run while others decode, until the pacer has timings (PREFILL_CHUNK=0). */
const INITIAL_PREFILL_CHUNK = { cpu: 16, cuda: 256, webgpu: 256 }
/** Prompt tokens per run when nobody else is waiting on the engine; bounds attention's scratch memory. */
const SOLO_PREFILL_CHUNK = 512
/**
 * The most for a GroupQueryAttention graph on a GPU (WebGPU), whose kernel takes long prompts faster
 * in larger runs: on an H200, 4,096 tokens in runs of 2,048 took 997 ms against 1,304 in runs of
 * 512, the same next token as the CPU's, and a Codex turn's first token 2.9 s against 4.4 s
 * (docs/performance.md).
 */
const GPU_SOLO_PREFILL_CHUNK = 2048
/**
 * GPU memory a lone prompt's run may take for attention's scores (heads x run x context x 4 bytes,
 * which the kernel holds whole): the 1.5B's 12 heads at its 16,384-token context take runs of 2,048
 * in 1.6 GB; a longer context gets shorter runs, never below SOLO_PREFILL_CHUNK.
 */
const GPU_ATTENTION_SCRATCH_BYTES = 2 * 2 ** 30
/** A cached prefix this long is worth a run of its own rather than computing it again in a group (#prefillPlan). */
const GROUP_REUSE_TOKENS = 64
/** Bound on one run's logits for graphs that return every position's. */
const ALL_POSITION_LOGITS_BYTES = 64 << 20
/**
 * How long an idle engine waits after the first request before it starts, so requests that
 * arrive together (a burst reaches the engine over a few milliseconds, each through its own
 * authentication and limit checks) are prefilled as one group and decode together from their
 * first step, instead of one decoding alone while the others' prompts are fed between its steps.
 */
const ADMISSION_WINDOW_MS = 10

/**
 * Prompt tokens a run takes when nobody else is waiting on the engine, for a session's device and
 * graph, and the longest sequence the engine allows (`contextLimit`).
 */
export function soloPrefillChunk (session: Pick<DecoderSession, 'device' | 'graphStyle'> & { model: Pick<ModelDir, 'numHeads'> }, contextLimit: number): number {
  if (session.device !== 'webgpu' || !usesGroupQueryAttention(session.graphStyle)) return SOLO_PREFILL_CHUNK
  const fits = Math.floor(GPU_ATTENTION_SCRATCH_BYTES / (4 * session.model.numHeads * contextLimit) / 64) * 64
  return Math.max(SOLO_PREFILL_CHUNK, Math.min(GPU_SOLO_PREFILL_CHUNK, fits))
}

/** Cache positions a sequence may come to hold, and for which cache scope. */
function reserveOf (seq: Sequence): Reservation {
  return { scope: seq.cacheScope, positions: seq.reservedPositions }
}

export class LocalEngine {
  readonly model: ModelDir
  readonly session: DecoderSession
  readonly tokenizer: TextTokenizer
  readonly template: ChatTemplate
  readonly scheduler: SchedulerSettings
  /** How key/value caches are kept between runs, as the graph's outputs require. */
  readonly cacheLayout: CacheLayout
  readonly #events: EngineEvents
  /** Admitted sequences whose prompt has not started. */
  readonly #waiting: Sequence[] = []
  /** The sequences whose prompts are being fed together, chunk by chunk. */
  #prefill: PrefillGroup | null = null
  readonly #batches: DecodeBatch[] = []
  #looping = false
  /** Sizes prompt chunks from measured timings when PREFILL_CHUNK is 0. */
  readonly #pacer: PrefillPacer
  /** The capture step requests decoding step on (webgpuCapture, webgpuCaptureRows); null when off. */
  readonly #captured: CapturedStep | null
  /** Prompt tokens a run takes when nobody else is waiting on the engine (SOLO_PREFILL_CHUNK, GPU_SOLO_PREFILL_CHUNK). */
  readonly #soloChunk: number
  /** Admission: sequences start only while their reserved caches fit in it. */
  readonly kvBudget: KvBudget
  /** Prompt plus generated tokens of one sequence; see contextLength. */
  readonly #contextLimit: number
  /** Caches kept for later requests of the same cache scope with the same start (cache-manager.ts); null when turned off. */
  readonly prefixes: CacheManager | null
  /**
   * Decoding sequences whose prompt the prefix cache does not hold yet. A prompt's cache (hundreds
   * of megabytes for an agent's) is copied only when something may reuse it while the sequence
   * runs: a request of its scope looking for a prefix, or the sequence cancelled. One that
   * finishes leaves its whole cache then (#remember), so its prompt alone is never copied: a copy
   * less a request, and none between its first tokens.
   */
  readonly #promptsNotKept = new Set<Sequence>()
  /** Each token's bytes and text (logprobs, grammars); built on first use. */
  readonly tokens: TokenTable
  /** A request's way in: its prompt rendered within the context, its limits checked, its constraint made (intake.ts). */
  readonly #intake: RequestIntake
  /** JSON response_format grammars: the matchers live in the model's grammar worker, reached through this. */
  readonly grammars = new GrammarClient()
  /** Prompts that start while others decode are fed inside their steps (mixed batches) instead of in runs of their own. */
  readonly #mixes: boolean
  /** Conversations whose next turn is computed ahead when the engine is idle (next-turn.ts). */
  readonly #nextTurns = new NextTurns<PendingTurn>()
  /** Prompt positions computed ahead for conversations' next turns, in all. */
  tokensComputedAhead = 0
  #closing = false
  /** Steps, prefix cache look-ups and load, reported to the metrics. */
  readonly #counters: EngineCounters

  private constructor (model: ModelDir, session: DecoderSession, tokenizer: TextTokenizer, template: ChatTemplate, events: EngineEvents,
    scheduler: SchedulerSettings, limits: { contextLength?: number; kvBudget: KvBudget; prefixCache?: boolean; prefixCacheBytes?: number; mixedBatches?: boolean; sharedPrefix?: SharedPrefix }, captured: CapturedStep | null = null) {
    this.model = model
    this.session = session
    this.tokenizer = tokenizer
    this.template = template
    this.#events = events
    this.#counters = new EngineCounters(report => events.stats?.(report))
    this.scheduler = scheduler
    this.kvBudget = limits.kvBudget
    this.#contextLimit = sequenceLimit(model, this.kvBudget, limits.contextLength)
    // Freed cache buffers kept for reuse, one context window's at most, within the budget (slot-buffers.ts says why).
    this.cacheLayout = cacheLayoutFor(session, captured, { most: (this.#contextLimit + SLOT_SLACK) * this.kvBudget.bytesPerToken, total: this.kvBudget.bytes })
    this.#captured = captured
    this.#pacer = new PrefillPacer(INITIAL_PREFILL_CHUNK[session.device])
    this.#soloChunk = soloPrefillChunk(session, this.#contextLimit)
    this.tokens = new TokenTable(tokenizer)
    this.#intake = new RequestIntake({ model, tokenizer, template, tokens: this.tokens, grammars: this.grammars, contextLength: this.#contextLimit })
    this.prefixes = limits.prefixCache === false
      ? null
      : new CacheManager(this.cacheLayout, this.kvBudget, {
        sharedIds: limits.sharedPrefix ? sharedPrefixIds(limits.sharedPrefix, messages => this.encodePrompt({ messages })) : [],
        keptBytes: limits.prefixCacheBytes || defaultKeptBytes(this.#contextLimit, this.kvBudget.bytesPerToken),
      })
    // With a prompt graph, prompt tokens and generated tokens run on different graphs, so they cannot share a run.
    this.#mixes = limits.mixedBatches !== false && this.cacheLayout.packsRows && this.#batchCapacity > 1 && !session.hasPromptGraph
    if (this.#contextLimit < 1) {
      throw new ModelDirError(`${model.dir}: the KV cache budget (${Math.round(this.kvBudget.bytes / 2 ** 20)} MiB) cannot hold one sequence of this model (${this.kvBudget.bytesPerToken} bytes per position): raise KV_CACHE_MB`)
    }
  }

  static async load (opts: EngineSettings, events: EngineEvents): Promise<LocalEngine> {
    const model = readModelDir(opts.modelDir, opts.dtype)
    const tokenizer = await loadTokenizer(opts.modelDir)
    // A token id past the embedding table fails inside the graph on every request that uses it.
    if (tokenizer.vocabSize > model.vocabSize) {
      throw new ModelDirError(`${opts.modelDir}: tokenizer.json has ids up to ${tokenizer.vocabSize - 1} but config.json says vocab_size ${model.vocabSize}: the tokenizer does not belong to this model`)
    }
    const template = ChatTemplate.fromTokenizerConfig(tokenizer.config, `${opts.modelDir}/tokenizer_config.json`)
    const session = await DecoderSession.load(model, { device: opts.device, deviceFrom: opts.deviceFrom, threads: opts.threads, promptGraph: opts.promptGraph })
    const scheduler = {
      maxBatch: opts.maxBatch ?? DEFAULT_SCHEDULER.maxBatch,
      prefillChunk: opts.prefillChunk ?? DEFAULT_SCHEDULER.prefillChunk,
    }
    const kvBudget = new KvBudget(opts.kvCacheBytes || defaultKvCacheBytes(), kvBytesPerToken(model, session.cacheType))
    let captured: CapturedStep | null = null
    try {
      // No longer than a sequence may be: its buffers take GPU memory for every position.
      const longest = sequenceLimit(model, kvBudget, opts.contextLength)
      // No more rows than decode together: a row no request takes costs a replay its work all the same.
      captured = await openCapturedStep(model, session, opts.webgpuCapture && Math.min(opts.webgpuCapture, longest), Math.min(opts.webgpuCaptureRows ?? 1, scheduler.maxBatch))
      return new LocalEngine(model, session, tokenizer, template, events, scheduler, { contextLength: opts.contextLength, kvBudget, prefixCache: opts.prefixCache, prefixCacheBytes: opts.prefixCacheBytes, mixedBatches: opts.mixedBatches, sharedPrefix: opts.sharedPrefix }, captured)
    } catch (err) {
      captured?.close()
      await session.close()
      throw err
    }
  }

  /**
   * Prompt plus generated tokens one sequence may hold: the smallest of the model's own limit
   * (max_position_embeddings, the tokenizer's model_max_length), models.json `contextLength`, and
   * what the KV cache budget holds for one sequence.
   */
  get contextLength (): number {
    return this.#contextLimit
  }

  /** Rows per decode batch: graphs that cannot take padded rows decode one sequence per run. */
  get #batchCapacity (): number {
    return this.session.takesPaddedRows ? this.scheduler.maxBatch : 1
  }

  /**
   * Waiting prompts to prefill together, up to `room`, and whether they go in whole. Graphs that
   * batch prompt chunks: as many as a batch holds. The others (gqa-masked: onnxruntime's
   * GroupQueryAttention takes several rows only for one token a row or without a past,
   * DecoderSession.batchesPromptChunks) feed one prompt at a time, except two kinds of burst:
   * prompts cached but for their last token, which go in together one token a row like a decode
   * step; and prompts that fit whole in one run together with no long cached prefix (a chat
   * template's first tokens are computed again), which go in at once, the shorter left-padded
   * (PrefillGroup's whole mode).
   */
  #prefillPlan (room: number): { count: number; whole: boolean } {
    const most = Math.min(room, this.#batchCapacity)
    if (this.session.batchesPromptChunks) return { count: most, whole: false }
    if (!this.cacheLayout.padsFirstRun) return { count: 1, whole: false }
    const waiting = this.#waiting.slice(0, most)
    // Each looked up once: the plan asks about the first twice.
    const cached: number[] = []
    const cachedAt = (i: number): number => (cached[i] ??= this.#reusablePrefix(waiting[i])?.length ?? 0)
    const lastTokenOnly = (i: number): boolean => waiting[i].promptIds.length > 1 && cachedAt(i) === waiting[i].promptIds.length - 1
    if (lastTokenOnly(0)) {
      let rows = 1
      while (rows < waiting.length && lastTokenOnly(rows)) rows++
      return { count: rows, whole: false }
    }
    // Whole prompts fed together in one run: twice a lone prompt's run.
    const tokens = this.#decodingCount === 0 ? 2 * this.#soloChunk : this.scheduler.prefillChunk || this.#pacer.chunkSize()
    let longest = 0
    let rows = 0
    for (let i = 0; i < waiting.length; i++) {
      longest = Math.max(longest, waiting[i].promptIds.length)
      if (cachedAt(i) >= GROUP_REUSE_TOKENS || longest > this.#positionsPerRun || (rows + 1) * longest > tokens) break
      rows++
    }
    return rows > 1 ? { count: rows, whole: true } : { count: 1, whole: false }
  }

  /**
   * Most positions one run may feed. A graph without num_logits_to_keep returns logits for every
   * position fed (4 bytes x vocabulary each: 300 MB for 512 positions of a 150k vocabulary), so
   * its prompt chunks are bounded by the memory those logits take; a gqa-masked graph on WebGPU
   * by where onnxruntime's kernel stays exact (DecoderSession.tokensPerRunLimit).
   */
  get #positionsPerRun (): number {
    const limit = Math.min(this.#soloChunk, this.session.tokensPerRunLimit)
    if (this.session.hasLogitsToKeep) return limit
    return Math.max(1, Math.min(limit, Math.floor(ALL_POSITION_LOGITS_BYTES / (4 * this.model.vocabSize))))
  }

  /** The prompt's token ids, exactly as the model will see them. */
  encodePrompt (request: Pick<GenerateRequest, 'messages'>): number[] {
    return this.#intake.renderPrompt(request).ids
  }

  /**
   * The prompt's ids, and whether the template left it inside an open <think> block. With
   * `maxTokens`, throws PromptTooLong once the prompt is shown to need more.
   */
  renderPrompt (request: Pick<GenerateRequest, 'messages'>, maxTokens?: number): EncodedPrompt {
    return this.#intake.renderPrompt(request, maxTokens)
  }

  /** Validates and queues a request (intake.ts); events for `id` follow. Throws ApiError before any work when it cannot be served. */
  start (request: GenerateRequest, id: string = randomUUID()): string {
    this.#waiting.push(this.#intake.sequence(request, id))
    if (!this.#looping) void this.#loop()
    return id
  }

  /**
   * Takes a finished reply's conversation as the next request will start with it (the messages,
   * then the reply as an assistant message) and computes it into the prefix cache once nothing
   * else is waiting (next-turn.ts), for `cacheScope`'s requests alone (the request's own scope).
   * Does nothing without a prefix cache, or for a conversation that cannot be rendered or would
   * fill the context.
   */
  prepareNextTurn (messages: ChatMessage[], cacheScope = ''): void {
    if (!this.prefixes || this.#closing) return
    this.#nextTurns.add({ messages, scope: cacheScope })
    if (!this.#looping) void this.#loop()
  }

  /** Resolves once the engine has nothing left to do: no sequence, and no next turn to compute ahead. */
  async idle (): Promise<void> {
    while (this.#looping) await sleep(5)
  }

  /** Computes the newest pending conversation's next turn ahead; stops at a chunk's end when a request arrives. */
  async #computeNextTurn (): Promise<void> {
    const pending = this.#nextTurns.take()
    const prefixes = this.prefixes
    if (!pending || !prefixes) return
    // Rendered here, while idle, rather than when the reply ends, between other sequences' steps.
    let ids: number[]
    try {
      ids = nextTurnIds(pending.messages, turn => this.renderPrompt({ messages: turn }, this.contextLength - 1).ids)
    } catch {
      return
    }
    const computed = await computeAhead(ids, {
      layout: this.cacheLayout,
      prefixes,
      scope: pending.scope,
      chunk: Math.min(AHEAD_CHUNK, this.#positionsPerRun),
      interrupted: () => this.#waiting.length > 0 || this.#closing,
      feed: async (cache, tokens, room) => {
        const out = await this.cacheLayout.run(cache, [tokens], 1, true, room)
        // New requests arrive as messages: let them in before deciding on the next chunk.
        await yieldToEventLoop()
        return out.cache
      },
    })
    this.tokensComputedAhead += computed
    if (computed > 0) this.#events.computedAhead?.(computed)
  }

  /** Stops a sequence before its next step; it finishes with reason "cancelled". */
  cancel (id: string): void {
    for (const seq of this.#allSequences()) if (seq.id === id) seq.cancelled = true
  }

  /** Sequences admitted and not finished: waiting, prefilling or decoding. */
  get activeCount (): number {
    return this.#waiting.length + (this.#prefill?.size ?? 0) + this.#decodingCount
  }

  get #decodingCount (): number {
    return this.#batches.reduce((n, b) => n + b.size, 0)
  }

  /**
   * Takes the waiting sequences, from the front of the queue, that may start now: at most `limit`,
   * and only while every cache-holding sequence's reservation still fits the budget beside the
   * cached prefixes, which give way, in fair-share order (cache-manager.ts), when a sequence needs their room.
   * The queue is never reordered, so a long request is not starved by short ones behind it. Each
   * sequence that starts takes the longest cached prefix of its prompt, in its own cache scope, into a cache of its own;
   * with `reuse` false, none does (a group fed whole computes every prompt from its start).
   */
  #admit (limit: number, reuse = true): Sequence[] {
    const reserves = this.#running()
    let count = 0
    while (count < limit && count < this.#waiting.length) {
      const seq = this.#waiting[count]
      const match = reuse ? this.#reusablePrefix(seq) : null
      // With nothing else running, nothing else will free room: any entry may give way (cache-manager.ts).
      const alone = reserves.length === 0
      reserves.push(reserveOf(seq))
      const fits = this.prefixes
        ? this.prefixes.makeRoom(seq.cacheScope, reserves, { keep: match?.entry, orKeep: true, anyScope: alone })
        : this.kvBudget.fits(reserves.map(r => r.positions))
      if (!fits) break
      // Taken now: making room for the next sequence may evict this one's entry.
      if (match && this.prefixes?.holds(match.entry)) {
        // With room for its prompt and reply (PrefillGroup's), where the layout grows ahead: no growth while it runs.
        seq.cache = this.prefixes.take(match, promptRoom(seq))
        seq.cachedTokens = seq.reusedTokens = match.length
      }
      if (this.prefixes && !seq.seeded) this.#counters.lookup(seq.promptIds.length, seq.reusedTokens)
      seq.timings.scheduledAt = wallClock()
      count++
    }
    return this.#waiting.splice(0, count)
  }

  /**
   * The longest cached prefix a sequence may start from (its prompt but its last token at most).
   * A seeded request computes its whole prompt, so the same seed gives the same reply bit for bit:
   * logits from a reused prefix can differ in the last bits from a fresh prompt's (the last prompt
   * token then runs alone, not inside the prompt's chunk), and sampling at a high temperature can
   * turn that into another token.
   */
  #reusablePrefix (seq: Sequence): PrefixMatch | null {
    if (seq.seeded || !this.prefixes) return null
    this.#keepPrompts(seq.cacheScope)
    return this.prefixes.lookup(seq.cacheScope, seq.promptIds, seq.promptIds.length - 1)
  }

  /** The reservations of the sequences holding caches: prefilling or decoding, and `joining` a batch. */
  #running (joining: Sequence[] = []): Reservation[] {
    return [...new Set([...(this.#prefill?.rows ?? []), ...this.#batches.flatMap(b => b.rows), ...joining])].map(reserveOf)
  }

  /**
   * Keeps a copy of a sequence's cache for later requests of its scope with the same start (row
   * `row` of `cache`), then lets go of entries until running sequences' reservations fit again.
   */
  #remember (seq: Sequence, cache: RowCache, row: number, joining: Sequence[] = []): void {
    // With a prompt graph, generated tokens' entries came from the main graph, while a later prompt
    // holding them would compute them on the prompt graph: only the prompt is kept, so a reused
    // prefix holds exactly what computing it afresh would.
    const kept = this.session.hasPromptGraph ? Math.min(seq.cachedTokens, seq.promptIds.length) : seq.cachedTokens
    if (!this.prefixes || kept === 0) return
    this.prefixes.remember(seq.cacheScope, seq.cachedIds.slice(0, kept), cache, row, this.#running(joining))
  }

  /**
   * A sequence's prompt is in (row `row` of `cache`) and it goes on decoding: its prompt is kept
   * later (#promptsNotKept), the operator's shared prefix now (every scope's lookups reuse it).
   */
  #promptIn (seq: Sequence, cache: RowCache, row: number, joining: Sequence[] = []): void {
    if (!this.prefixes) return
    this.#promptsNotKept.add(seq)
    this.prefixes.keepShared(seq.promptIds, cache, row, this.#running(joining))
  }

  /** Keeps the prompts of `scope`'s decoding sequences that are not kept yet (#promptsNotKept). */
  #keepPrompts (scope: string): void {
    for (const seq of this.#promptsNotKept) {
      if (seq.cacheScope !== scope) continue
      const batch = this.#batches.find(b => b.rows.includes(seq))
      if (batch) this.#keepPrompt(seq, batch)
      this.#promptsNotKept.delete(seq)
    }
  }

  /** Keeps the prompt of `seq`, a row of `batch`, in the prefix cache. */
  #keepPrompt (seq: Sequence, batch: DecodeBatch): void {
    this.#promptsNotKept.delete(seq)
    if (!this.prefixes || !batch.cache) return
    this.prefixes.remember(seq.cacheScope, seq.promptIds, batch.cache, batch.rows.indexOf(seq), this.#running())
  }

  * #allSequences (): Iterable<Sequence> {
    yield * this.#waiting
    if (this.#prefill) yield * this.#prefill.rows
    for (const batch of this.#batches) yield * batch.rows
  }

  async #loop (): Promise<void> {
    this.#looping = true
    try {
      await sleep(ADMISSION_WINDOW_MS)
      while (this.activeCount > 0 || this.#nextTurns.size > 0) {
        this.#dropCancelled()
        if (this.activeCount === 0) {
          await this.#computeNextTurn()
          continue
        }
        const room = this.scheduler.maxBatch - this.#decodingCount
        if (!this.#prefill && this.#waiting.length > 0 && room > 0) {
          // Waiting prompts in arrival order that will have a row to decode in, up to what one run
          // may batch and what the KV cache budget still holds.
          const plan = this.#prefillPlan(room)
          const admitted = this.#admit(plan.count, !plan.whole)
          if (admitted.length > 0 && this.#mixes && this.#decodingCount > 0) {
            // Others are decoding: these prompts ride in their steps, a chunk per step.
            for (const seq of admitted) this.#batchWithRoom().join(seq)
          } else if (admitted.length > 0) {
            this.#prefill = new PrefillGroup(this.cacheLayout, admitted, { whole: plan.whole && admitted.length > 1, batchesChunks: this.session.batchesPromptChunks })
          }
        }
        if (this.#prefill) {
          await this.#prefillChunk(this.#prefill)
          await yieldToEventLoop()
          this.#dropCancelled()
        }
        for (const batch of this.#batches) {
          if (batch.size === 0) continue
          await this.#decodeStep(batch)
          await yieldToEventLoop()
          this.#dropCancelled()
        }
        // Idle one-row batches (graphs that cannot pad rows) are dropped; the shared batch is kept.
        for (let i = this.#batches.length - 1; i >= 0; i--) {
          if (this.#batches[i].size === 0 && this.#batchCapacity === 1) this.#batches.splice(i, 1)
        }
        this.#counters.report(() => this.#load())
      }
    } finally {
      this.#looping = false
      this.#counters.report(() => this.#load(), true)
    }
  }

  /**
   * Feeds the next slice of the group's prompts. A row whose prompt is complete samples its first
   * token and leaves the group for a decode batch.
   */
  async #prefillChunk (group: PrefillGroup): Promise<void> {
    // Tokens for this run, shared by the rows: alone, large chunks (bounded for attention's scratch
    // memory); beside decoding streams, what the pacer allows between their steps.
    const budget = Math.min(this.#positionsPerRun, this.#decodingCount === 0
      ? this.#soloChunk
      : this.scheduler.prefillChunk || this.#pacer.chunkSize())
    const started = performance.now()
    let logits: Float32Array
    try {
      const out = await group.feed(Math.max(1, Math.floor(budget / group.size)))
      logits = out.logits
      this.#pacer.recordPrefill(out.tokens, performance.now() - started)
      this.#counters.step('prefill', out.tokens)
    } catch (err) {
      const rows = group.rows
      group.free()
      this.#prefill = null
      this.#fail(rows, err)
      return
    }
    const done = group.rows.filter(seq => !seq.prefilling)
    const failed = await this.#prepareGrammars(done)
    const ready = new Map<Sequence, StepResult>()
    group.rows.forEach((seq, b) => {
      if (seq.prefilling || failed.has(seq)) return
      try {
        ready.set(seq, seq.advance(this.#lastRow(logits, b)))
      } catch (err) {
        failed.set(seq, err)
      }
    })
    // The first tokens go out before the caches are copied (each copy is the whole prompt's cache).
    for (const [seq, result] of ready) this.#emit(seq, result)
    group.remove(new Set([...ready.keys(), ...failed.keys()]))
    if (group.size === 0) this.#prefill = null
    for (const [seq, err] of failed) this.#fail([seq], err)
    // Replies that ended go out before their caches are kept (a copy of the whole cache each).
    for (const [seq, result] of ready) if (result.finish) this.#finish(seq, result.finish)
    // Rows that left the group to decode still hold their reservations while the others' prompts are kept.
    const joining = [...ready].filter(([, result]) => !result.finish).map(([seq]) => seq)
    for (const [seq, result] of ready) {
      if (result.finish) {
        if (seq.cache) {
          this.#remember(seq, seq.cache, 0, joining)
          this.cacheLayout.free(seq.cache)
        }
        seq.cache = null
      } else {
        if (seq.cache) this.#promptIn(seq, seq.cache, 0, joining)
        this.#batchWithRoom().join(seq)
      }
    }
    if (joining.length < ready.size) this.#reportKept()
  }

  async #decodeStep (batch: DecodeBatch): Promise<void> {
    let logits: Float32Array
    // Rows still prefilling (mixed batches) take a share of the prompt tokens the pacer allows
    // beside the decoding rows; with no row decoding, the large chunks of a prompt fed alone.
    const prefilling = new Set(batch.prefilling)
    const decoding = batch.size - prefilling.size
    let promptChunk = 0
    if (prefilling.size > 0) {
      const budget = Math.min(this.#positionsPerRun, decoding === 0 ? this.#soloChunk : this.scheduler.prefillChunk || this.#pacer.chunkSize(decoding))
      promptChunk = Math.floor(budget / prefilling.size)
    }
    const started = performance.now()
    try {
      const out = await batch.step(promptChunk)
      logits = out.logits
      if (out.promptTokens > 0) this.#pacer.recordPrefill(out.promptTokens, performance.now() - started, decoding)
      else this.#pacer.recordDecode(performance.now() - started, batch.size)
      this.#counters.step(out.promptTokens > 0 ? (decoding > 0 ? 'mixed' : 'prefill') : 'decode', decoding + out.promptTokens)
    } catch (err) {
      const rows = batch.rows
      batch.leave(new Set(rows))
      this.#fail(rows, err)
      return
    }
    // Rows whose prompt is still not all in have nothing to sample yet.
    const sampling = batch.rows.filter(seq => !seq.prefilling)
    const failed = await this.#prepareGrammars(sampling)
    const finished = new Set<Sequence>(failed.keys())
    const sampled: Array<{ seq: Sequence; row: number; result: StepResult }> = []
    batch.rows.forEach((seq, b) => {
      if (seq.prefilling || failed.has(seq)) return
      let result: StepResult
      try {
        result = seq.advance(this.#lastRow(logits, b))
      } catch (err) {
        failed.set(seq, err)
        finished.add(seq)
        return
      }
      this.#emit(seq, result)
      sampled.push({ seq, row: b, result })
    })
    // Every row's token, and every reply that ended, has gone out; then the caches kept for later
    // requests (each copy is a whole cache): a finished row's with its output; a prompt just
    // completed, as one fed in runs of its own is, only noted (#promptsNotKept).
    for (const { seq, result } of sampled) {
      if (!result.finish) continue
      finished.add(seq)
      this.#finish(seq, result.finish)
    }
    for (const { seq, row, result } of sampled) {
      if (batch.cache && result.finish) this.#remember(seq, batch.cache, row)
      else if (batch.cache && prefilling.has(seq)) this.#promptIn(seq, batch.cache, row)
    }
    if (finished.size > 0) this.#reportKept()
    batch.leave(finished)
    for (const [seq, err] of failed) this.#fail([seq], err)
  }

  /**
   * Computes the grammar masks of the constrained rows about to sample (rows without a grammar do
   * nothing here); returns the rows whose grammar failed, with why.
   */
  async #prepareGrammars (rows: Sequence[]): Promise<Map<Sequence, unknown>> {
    const failed = new Map<Sequence, unknown>()
    for (const seq of rows) {
      if (!seq.constrained) continue
      try {
        await seq.prepare()
      } catch (err) {
        failed.set(seq, err)
      }
    }
    return failed
  }

  #emit (seq: Sequence, result: StepResult): void {
    if (result.content !== '' || result.reasoning !== '' || result.logprobs) {
      this.#events.delta(seq.id, { content: result.content, reasoning: result.reasoning, ...(result.logprobs ? { logprobs: result.logprobs } : {}) })
    }
  }

  /** Row b's logits (each step keeps one position per row). */
  #lastRow (logits: Float32Array, b: number): Float32Array {
    const vocab = this.model.vocabSize
    return logits.subarray(b * vocab, (b + 1) * vocab)
  }

  #batchWithRoom (): DecodeBatch {
    let batch = this.#batches.find(b => b.hasRoom)
    if (!batch) {
      batch = new DecodeBatch(this.cacheLayout, this.#batchCapacity)
      this.#batches.push(batch)
    }
    return batch
  }

  #dropCancelled (): void {
    for (let i = this.#waiting.length - 1; i >= 0; i--) {
      const seq = this.#waiting[i]
      if (seq.cancelled) {
        this.#waiting.splice(i, 1)
        this.#finish(seq, 'cancelled')
      }
    }
    const group = this.#prefill
    const gone = new Set(group?.rows.filter(r => r.cancelled))
    if (group && gone.size > 0) {
      group.remove(gone, true)
      if (group.size === 0) this.#prefill = null
      for (const seq of gone) this.#finish(seq, 'cancelled')
    }
    for (const batch of this.#batches) {
      const gone = new Set(batch.rows.filter(r => r.cancelled))
      if (gone.size === 0) continue
      // A cancelled reply's prompt is kept, as a finished one's is (not while the engine closes).
      for (const seq of gone) if (this.#promptsNotKept.has(seq) && !this.#closing) this.#keepPrompt(seq, batch)
      batch.leave(gone)
      for (const seq of gone) this.#finish(seq, 'cancelled')
    }
  }

  /** Reports the load now: finished replies' caches were just kept, after their finish went out (which reported it too). */
  #reportKept (): void {
    this.#counters.report(() => this.#load(), true)
  }

  #finish (seq: Sequence, reason: FinishReason): void {
    this.#promptsNotKept.delete(seq)
    seq.release()
    // Before the finish: whoever reads the metrics after the reply sees its steps counted.
    this.#counters.report(() => this.#load(), true)
    const prompt = seq.promptIds.length
    this.#events.finish(seq.id, reason, {
      prompt_tokens: prompt,
      completion_tokens: seq.generated,
      total_tokens: prompt + seq.generated,
      prompt_tokens_details: { cached_tokens: seq.reusedTokens },
      completion_tokens_details: { reasoning_tokens: seq.reasoningTokens },
    }, reason === 'stop' ? seq.matchedStop ?? undefined : undefined, seq.timings)
  }

  /** Running and waiting sequences, and the KV cache budget's share held for running ones and kept by the prefix cache. */
  #load (): EngineLoad {
    const reserves = this.#running().map(r => r.positions)
    const budget = this.kvBudget.tokens
    // As admission counts them: rows padded to the largest reservation (kv-budget.ts).
    const held = reserves.length === 0 ? 0 : reserves.length * Math.max(...reserves)
    return {
      running: (this.#prefill?.size ?? 0) + this.#decodingCount,
      waiting: this.#waiting.length,
      kvUsage: budget > 0 ? Math.min(1, held / budget) : 0,
      prefixCacheUsage: budget > 0 && this.prefixes ? Math.min(1, this.prefixes.keptPositions / budget) : 0,
      replayedTokens: this.cacheLayout.replayedTokens ?? 0,
    }
  }

  #fail (seqs: Sequence[], err: unknown): void {
    for (const seq of seqs) {
      this.#promptsNotKept.delete(seq)
      seq.release()
      if (seq.cache) this.cacheLayout.free(seq.cache)
      seq.cache = null
      this.#events.error(seq.id, err instanceof ApiError ? err : new ApiError('internal_error', `inference failed: ${(err as Error).message}`))
    }
  }

  /** Positions a row of the capture step holds (ONNX_WEBGPU_CAPTURE); 0 when there is none. */
  get capturePositions (): number {
    return this.#captured?.length ?? 0
  }

  /** Rows the capture step takes (ONNX_WEBGPU_CAPTURE_ROWS within MAX_BATCH); 0 when there is none. */
  get captureRows (): number {
    return this.#captured?.rows ?? 0
  }

  async close (): Promise<void> {
    this.#closing = true
    this.#nextTurns.clear()
    for (const seq of this.#allSequences()) seq.cancelled = true
    while (this.#looping) await yieldToEventLoop()
    this.prefixes?.clear()
    this.#captured?.close()
    await this.session.close()
  }
}

/**
 * The capture step for requests decoding on WebGPU (EngineSettings.webgpuCapture, webgpuCaptureRows), or null:
 * asked for and not possible on this device and model, it says why.
 */
async function openCapturedStep (model: ModelDir, session: DecoderSession, length: number | undefined, rows: number): Promise<CapturedStep | null> {
  if (!length) return null
  // Other devices have no graph capture to reach: the setting is the WebGPU device's.
  if (session.device !== 'webgpu') return null
  if (!session.cacheInPlace || session.cacheType !== 'float32') {
    throw new ModelDirError(`${model.onnxPath}: ONNX_WEBGPU_CAPTURE needs the GPU form (chatd convert --for gpu --capture-step), not a ${session.graphStyle} graph with a ${session.cacheType} cache`)
  }
  if (!model.stepOnnxPath) throw new ModelDirError(`${model.dir}: ONNX_WEBGPU_CAPTURE needs onnx/${CAPTURE_STEP_FILE} beside the GPU form: convert the model again with chatd convert --for gpu --capture-step`)
  // Loaded only here: the FFI (koffi) and onnxruntime's C API stay out of engines that do not capture.
  const { CapturedStep } = await import('../device/captured-step.ts')
  return CapturedStep.open(model, length, rows)
}

/** The most positions one sequence may hold: the model's context, models.json's `contextLength`, and what the KV budget holds for one. */
function sequenceLimit (model: ModelDir, budget: KvBudget, contextLength?: number): number {
  return Math.min(model.contextLength, contextLength ?? Infinity, budget.longestSequence)
}
