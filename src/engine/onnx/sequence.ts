// One request's generation state inside the engine: its tokens, key/value
// cache, sampler, and the text pipeline (incremental detokenizer, then stop
// strings) that turns sampled ids into deltas safe to send.
import type { FinishReason, GenerateRequest } from '../backend.ts'
import type { KvCache } from './decoder-session.ts'
import { IncrementalDetokenizer } from './detokenizer.ts'
import { createRng, type Rng } from './rng.ts'
import { sample } from './sampler.ts'
import { StopStringMatcher } from './stop-strings.ts'
import type { TextTokenizer } from './tokenizer.ts'

export interface StepResult {
  /** Text that became final with this token ('' when none). */
  text: string
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
  cache: KvCache | null = null
  /** Positions of this sequence in its cache (prompt and generated tokens fed so far). */
  cachedTokens = 0
  generated = 0
  cancelled = false
  private readonly request: GenerateRequest
  private readonly rng: Rng
  private readonly detokenizer: IncrementalDetokenizer
  private readonly stops: StopStringMatcher
  private readonly eosIds: Set<number>
  private readonly validVocab: number

  constructor (opts: {
    id: string
    promptIds: number[]
    maxNewTokens: number
    request: GenerateRequest
    tokenizer: TextTokenizer
    eosIds: number[]
    validVocab: number
  }) {
    this.id = opts.id
    this.promptIds = opts.promptIds
    this.maxNewTokens = opts.maxNewTokens
    this.request = opts.request
    this.rng = createRng(opts.request.seed)
    this.detokenizer = new IncrementalDetokenizer(opts.tokenizer, opts.promptIds)
    this.stops = new StopStringMatcher(opts.request.stop)
    this.eosIds = new Set(opts.eosIds)
    this.validVocab = opts.validVocab
  }

  /** Whether prompt tokens remain to be fed. */
  get prefilling (): boolean {
    return this.cachedTokens < this.promptIds.length
  }

  /** The next slice of the prompt to feed, at most `size` tokens. */
  nextPromptChunk (size: number): number[] {
    return this.promptIds.slice(this.cachedTokens, this.cachedTokens + size)
  }

  /** Samples from this sequence's row of logits and advances its text. */
  advance (logits: Float32Array): StepResult {
    const id = sample(logits, this.request, this.rng, this.validVocab)
    if (this.eosIds.has(id)) return { text: this.finishText(), finish: 'stop' }
    this.generated++
    this.pending = [id]
    const piece = this.stops.push(this.detokenizer.push(id))
    if (piece.stopped) return { text: piece.emit, finish: 'stop' }
    if (this.generated >= this.maxNewTokens) {
      return { text: piece.emit + this.finishText(), finish: 'length' }
    }
    return { text: piece.emit }
  }

  /** Releases whatever text the detokenizer and stop matcher still hold. */
  private finishText (): string {
    const tail = this.stops.push(this.detokenizer.flush())
    return tail.stopped ? tail.emit : tail.emit + this.stops.flush()
  }
}
