// One request's generation state inside the engine: its tokens, key/value
// cache, sampler, and the text pipeline (incremental detokenizer, then stop
// strings) that turns sampled ids into deltas safe to send. With a JSON
// response_format, a grammar masks the logits before sampling (grammar.ts);
// a forced tool call is such a constraint too (tool-call-constraint.ts); with
// logprobs, each token's log-probability travels with the delta that releases
// its text.
import { wallClock, type DeltaLogprobs, type FinishReason, type GenerateRequest, type GenerateTimings, type TokenLogprob } from '../../backend.ts'
import type { Constraint } from '../grammar/grammar.ts'
import { tokenLogprob } from '../sampling/logprobs.ts'
import type { TokenTable } from '../text/token-bytes.ts'
import type { RowCache } from '../cache/kv-cache.ts'
import { KvBudget } from '../cache/kv-budget.ts'
import { IncrementalDetokenizer } from '../text/detokenizer.ts'
import { createRng, type Rng } from '../sampling/rng.ts'
import { sample } from '../sampling/sampler.ts'
import { adjustLogits, adjustsLogits, TokenCounts, type LogitAdjustments } from '../sampling/logit-adjust.ts'
import { StopStringMatcher } from '../../stop-strings.ts'
import { ReasoningSplitter, type SplitText } from '../../reasoning.ts'
import type { TextTokenizer } from '../text/tokenizer.ts'

export interface StepResult {
  /** Answer text that became final with this token ('' when none). */
  content: string
  /** Thinking text that became final with this token ('' when none). */
  reasoning: string
  /** Set when the sequence is done. */
  finish?: Exclude<FinishReason, 'cancelled'>
  /** With logprobs: the tokens whose text this step released. */
  logprobs?: DeltaLogprobs
}

/** A token's log-probability on its way out: sent with the step that releases the last of its text. */
interface PendingLogprob {
  entry: TokenLogprob
  /** Sampled inside the thinking block (its tags included). */
  thinking: boolean
  /** Its text's place in the detokenized output, [start, end); -1 while the detokenizer holds it. */
  start: number
  end: number
}

/** What a cache holding these rows may grow to: the largest reservation (admission pads every row to it, kv-budget.ts). */
export function roomFor (rows: Sequence[]): number {
  return Math.max(...rows.map(r => r.reservedPositions))
}

export class Sequence {
  readonly id: string
  readonly promptIds: number[]
  /** The most tokens this sequence may generate. */
  readonly maxNewTokens: number
  /** The token to feed at the next decode step (the last one sampled). */
  pending: number[] = []
  /** Cache positions this sequence may come to hold: what admission reserves for it (kv-budget.ts). */
  get reservedPositions (): number {
    return KvBudget.reserveOf(this.promptIds.length, this.maxNewTokens)
  }

  /** This sequence's own cache while it prefills; a DecodeBatch holds it afterwards. */
  cache: RowCache | null = null
  /** Positions of this sequence in its cache (prompt and generated tokens fed so far). */
  cachedTokens = 0
  /** Prompt positions taken from the prefix cache instead of computed (prefix-cache.ts). */
  reusedTokens = 0
  generated = 0
  /** The ids generated so far, in order (the end-of-sequence id excluded). */
  readonly outputIds: number[] = []
  cancelled = false
  /** The request gave a seed: it must replay exactly. */
  readonly seeded: boolean
  /** When it was queued, started (scheduledAt, set by the engine), and sampled its first and last token. */
  readonly timings: GenerateTimings = { queuedAt: wallClock() }
  /** Whose prefix cache the sequence may reuse and leaves its cache in (GenerateRequest.cacheScope). */
  readonly cacheScope: string
  readonly #request: GenerateRequest
  readonly #rng: Rng
  readonly #detokenizer: IncrementalDetokenizer
  readonly #stops: StopStringMatcher
  readonly #reasoning: ReasoningSplitter
  readonly #eosIds: Set<number>
  readonly #validVocab: number
  readonly #tokens: TokenTable | undefined
  /** The grammar of a JSON response_format: while it is being made, then made. */
  readonly #constraintMade: Promise<Constraint> | undefined
  #constraint: Constraint | undefined
  /** Thinking tokens allowed (a constrained answer's budget, reasoning_effort's); undefined: no cap, 0: closed at once. */
  readonly #thinkingCap: number | undefined
  readonly #closeThinking: number[]
  #thinkingTokens = 0
  /** Tokens generated inside thinking, its opening and closing tags included (usage's reasoning_tokens). */
  reasoningTokens = 0
  /** Ids fed whatever the logits say (the thinking block's close, at the budget); forced once at most. */
  #forced: number[] = []
  #closeForced = false
  /** The request's penalties, logit_bias and min_p; undefined when it has none. */
  readonly #adjust: LogitAdjustments | undefined
  /** How often each token was generated so far (for the penalties). */
  readonly #counts = new TokenCounts()
  /** Tokens whose log-probabilities have not gone out yet, in order. */
  readonly #logprobs: PendingLogprob[] = []
  /** Characters the detokenizer has released; characters the stop matcher has passed on. */
  #detokenized = 0
  #pastStops = 0

  constructor (opts: {
    id: string
    promptIds: number[]
    maxNewTokens: number
    request: GenerateRequest
    tokenizer: TextTokenizer
    eosIds: number[]
    validVocab: number
    /** The rendered prompt ends inside an open <think> block: output starts as thinking. */
    startsInReasoning: boolean
    /** Each token's bytes and text: needed with request.logprobs. */
    tokens?: TokenTable
    /** The grammar of the request's JSON response_format, or of its forced tool call. */
    constraint?: Promise<Constraint>
    /** The ids of `</think>`, forced when thinking reaches its budget. */
    closeThinking?: number[]
    /** reasoning_effort's thinking budget (reasoning-effort.ts); undefined: none. */
    effortBudget?: number
  }) {
    this.id = opts.id
    this.promptIds = opts.promptIds
    this.maxNewTokens = opts.maxNewTokens
    this.#request = opts.request
    this.#rng = createRng(opts.request.seed)
    this.seeded = opts.request.seed !== undefined
    this.cacheScope = opts.request.cacheScope ?? ''
    this.#detokenizer = new IncrementalDetokenizer(opts.tokenizer, opts.promptIds)
    // A JSON response_format's grammar, or a tool call's (tool-call-constraint.ts).
    const json = opts.constraint !== undefined
    // A constrained answer ends where its grammar ends: a stop string could cut the JSON short.
    this.#stops = new StopStringMatcher(json ? [] : opts.request.stop)
    this.#reasoning = new ReasoningSplitter(opts.startsInReasoning)
    // Without an open thinking block the constrained answer starts at once, and no block follows.
    if (json && !opts.startsInReasoning) this.#reasoning.answerOnly()
    this.#eosIds = new Set(opts.eosIds)
    this.#validVocab = opts.validVocab
    this.#tokens = opts.request.logprobs ? opts.tokens : undefined
    this.#constraintMade = json ? opts.constraint : undefined
    this.#constraintMade?.catch(() => {}) // awaited in prepare(); a failure is reported there
    const caps = [json && opts.request.thinkingBudget ? opts.request.thinkingBudget : undefined, opts.effortBudget].filter(c => c !== undefined)
    this.#thinkingCap = caps.length > 0 ? Math.min(...caps) : undefined
    this.#closeThinking = opts.closeThinking ?? []
    const r = opts.request
    const adjust: LogitAdjustments = {
      presencePenalty: r.presencePenalty,
      frequencyPenalty: r.frequencyPenalty,
      logitBias: r.logitBias ? new Map(Object.entries(r.logitBias).map(([id, bias]) => [Number(id), bias])) : undefined,
      minP: r.minP,
      temperature: r.temperature,
    }
    this.#adjust = adjustsLogits(adjust) ? adjust : undefined
  }

  /** Whether the next token is constrained: prepare() must run before advance(). */
  get constrained (): boolean {
    return this.#constraintMade !== undefined && !this.#reasoning.inReasoning && this.#forced.length === 0 && !this.#budgetSpent
  }

  /** Thinking has used its budget (a constrained answer's, or reasoning_effort's): the block is closed now. */
  get #budgetSpent (): boolean {
    return this.#thinkingCap !== undefined && !this.#closeForced && this.#reasoning.inReasoning && this.#thinkingTokens >= this.#thinkingCap
  }

  /** Computes the grammar's mask for the next token (the grammar is made first if need be). */
  async prepare (): Promise<void> {
    this.#constraint ??= await this.#constraintMade
    await this.#constraint?.prepare()
  }

  /** The request's stop string that ended the reply; null while none has. */
  get matchedStop (): string | null {
    return this.#stops.matchedStop
  }

  /** Lets go of the grammar's matcher (the sequence is done, however it ended). */
  release (): void {
    void this.#constraintMade?.then(constraint => constraint.dispose(), () => {})
  }

  /** The ids whose keys and values the sequence's cache holds: its prompt, then its output as fed back. */
  get cachedIds (): number[] {
    return [...this.promptIds, ...this.outputIds].slice(0, this.cachedTokens)
  }

  /** Whether prompt tokens remain to be fed. */
  get prefilling (): boolean {
    return this.cachedTokens < this.promptIds.length
  }

  /** The next slice of the prompt to feed, at most `size` tokens. */
  nextPromptChunk (size: number): number[] {
    return this.promptIds.slice(this.cachedTokens, this.cachedTokens + size)
  }

  /**
   * Samples from this sequence's row of logits and advances its text:
   * incremental detokenizer, then stop strings (on the text as generated),
   * then the split of thinking from answer.
   */
  advance (logits: Float32Array): StepResult {
    const n = this.#validVocab
    if (this.#forced.length === 0 && this.#budgetSpent) {
      this.#forced = [...this.#closeThinking]
      this.#closeForced = true
    }
    const forced = this.#forced.shift()
    const constrained = forced === undefined && this.#constraint !== undefined && !this.#reasoning.inReasoning
    if (constrained) this.#constraint?.apply(logits, n)
    if (forced === undefined && this.#adjust) adjustLogits(logits, n, this.#adjust, this.#counts)
    const id = forced ?? sample(logits, this.#request, this.#rng, n)
    this.timings.lastTokenAt = wallClock()
    this.timings.firstTokenAt ??= this.timings.lastTokenAt
    this.#counts.add(id)
    if (this.#eosIds.has(id)) return this.#withLogprobs({ ...this.#finishText(), finish: 'stop' }, true)
    if (constrained && !this.#constraint?.accept(id)) throw new Error(`the grammar refused token ${id}, which its own mask allowed`)
    const thinkingBefore = this.#reasoning.inReasoning
    if (thinkingBefore) this.#thinkingTokens++
    this.generated++
    this.outputIds.push(id)
    this.pending = [id]
    const pending = this.#tokens ? this.#queueLogprob(logits, n, id) : undefined
    const piece = this.#stops.push(this.#fromDetokenizer(this.#detokenizer.push(id)))
    this.#pastStops += piece.emit.length
    let result: StepResult
    if (piece.stopped) {
      result = { ...this.#split(piece.emit, true), finish: 'stop' }
    } else if (this.generated >= this.maxNewTokens) {
      const now = this.#split(piece.emit, false)
      const rest = this.#finishText()
      result = { content: now.content + rest.content, reasoning: now.reasoning + rest.reasoning, finish: 'length' }
    } else {
      result = this.#split(piece.emit, false)
    }
    if (thinkingBefore || this.#reasoning.inReasoning) this.reasoningTokens++
    if (pending) pending.thinking = thinkingBefore || this.#reasoning.inReasoning
    return this.#withLogprobs(result, result.finish !== undefined)
  }

  /** Queues the log-probability of token `id`, drawn from `logits` (as the sampler saw them). */
  #queueLogprob (logits: Float32Array, n: number, id: number): PendingLogprob {
    const entry = tokenLogprob(logits, n, this.#request.temperature, id, this.#request.topLogprobs ?? 0, this.#tokens as TokenTable)
    const pending = { entry, thinking: false, start: -1, end: -1 }
    this.#logprobs.push(pending)
    return pending
  }

  /** Notes what the detokenizer released: the tokens it held until now have their place in the text. */
  #fromDetokenizer (text: string): string {
    const start = this.#detokenized
    this.#detokenized += text.length
    if (!this.#detokenizer.holding) {
      for (let k = this.#logprobs.length - 1; k >= 0 && this.#logprobs[k].end === -1; k--) {
        this.#logprobs[k].start = start
        this.#logprobs[k].end = this.#detokenized
      }
    }
    return text
  }

  /**
   * Adds to a step's result the log-probabilities of the tokens whose text is out now: all of it
   * past the detokenizer, the stop matcher and the thinking splitter. At the end, tokens whose text
   * was partly sent go too; those of a stop string, never sent, do not.
   */
  #withLogprobs (result: StepResult, final: boolean): StepResult {
    if (!this.#tokens) return result
    const released = this.#pastStops - this.#reasoning.heldLength
    const out: DeltaLogprobs = { content: [], reasoning: [] }
    while (this.#logprobs.length > 0) {
      const next = this.#logprobs[0]
      const isOut = next.end !== -1 && (next.end <= released || (final && next.start < released))
      if (!isOut) break
      this.#logprobs.shift()
      ;(next.thinking ? out.reasoning : out.content).push(next.entry)
    }
    if (final) this.#logprobs.length = 0
    return out.content.length > 0 || out.reasoning.length > 0 ? { ...result, logprobs: out } : result
  }

  /** Releases whatever text the detokenizer, stop matcher and splitter still hold. */
  #finishText (): SplitText {
    const tail = this.#stops.push(this.#fromDetokenizer(this.#detokenizer.flush()))
    const text = tail.stopped ? tail.emit : tail.emit + this.#stops.flush()
    this.#pastStops += text.length
    return this.#split(text, true)
  }

  #split (text: string, final: boolean): SplitText {
    const now = this.#reasoning.push(text)
    if (!final) return now
    const rest = this.#reasoning.flush()
    return { content: now.content + rest.content, reasoning: now.reasoning + rest.reasoning }
  }
}
