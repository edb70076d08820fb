// One request's generation state inside the engine: its tokens, key/value
// cache, sampler, and the text pipeline (incremental detokenizer, then stop
// strings) that turns sampled ids into deltas safe to send.
import type { FinishReason, GenerateRequest } from '../backend.ts'
import type { RowCache } from './kv-cache.ts'
import { IncrementalDetokenizer } from './detokenizer.ts'
import { createRng, type Rng } from './rng.ts'
import { sample } from './sampler.ts'
import { StopStringMatcher } from './stop-strings.ts'
import { ReasoningSplitter, type SplitText } from '../reasoning.ts'
import type { TextTokenizer } from './tokenizer.ts'

export interface StepResult {
  /** Answer text that became final with this token ('' when none). */
  content: string
  /** Thinking text that became final with this token ('' when none). */
  reasoning: string
  /** Set when the sequence is done. */
  finish?: Exclude<FinishReason, 'cancelled'>
}

export class Sequence {
  readonly id: string
  readonly promptIds: number[]
  /** The most tokens this sequence may generate. */
  readonly maxNewTokens: number
  /** The token to feed at the next decode step (the last one sampled). */
  pending: number[] = []
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
  readonly #request: GenerateRequest
  readonly #rng: Rng
  readonly #detokenizer: IncrementalDetokenizer
  readonly #stops: StopStringMatcher
  readonly #reasoning: ReasoningSplitter
  readonly #eosIds: Set<number>
  readonly #validVocab: number

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
  }) {
    this.id = opts.id
    this.promptIds = opts.promptIds
    this.maxNewTokens = opts.maxNewTokens
    this.#request = opts.request
    this.#rng = createRng(opts.request.seed)
    this.seeded = opts.request.seed !== undefined
    this.#detokenizer = new IncrementalDetokenizer(opts.tokenizer, opts.promptIds)
    this.#stops = new StopStringMatcher(opts.request.stop)
    this.#reasoning = new ReasoningSplitter(opts.startsInReasoning)
    this.#eosIds = new Set(opts.eosIds)
    this.#validVocab = opts.validVocab
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
    const id = sample(logits, this.#request, this.#rng, this.#validVocab)
    if (this.#eosIds.has(id)) return { ...this.#finishText(), finish: 'stop' }
    this.generated++
    this.outputIds.push(id)
    this.pending = [id]
    const piece = this.#stops.push(this.#detokenizer.push(id))
    if (piece.stopped) return { ...this.#split(piece.emit, true), finish: 'stop' }
    if (this.generated >= this.maxNewTokens) {
      const now = this.#split(piece.emit, false)
      const rest = this.#finishText()
      return { content: now.content + rest.content, reasoning: now.reasoning + rest.reasoning, finish: 'length' }
    }
    return this.#split(piece.emit, false)
  }

  /** Releases whatever text the detokenizer, stop matcher and splitter still hold. */
  #finishText (): SplitText {
    const tail = this.#stops.push(this.#detokenizer.flush())
    return this.#split(tail.stopped ? tail.emit : tail.emit + this.#stops.flush(), true)
  }

  #split (text: string, final: boolean): SplitText {
    const now = this.#reasoning.push(text)
    if (!final) return now
    const rest = this.#reasoning.flush()
    return { content: now.content + rest.content, reasoning: now.reasoning + rest.reasoning }
  }
}
