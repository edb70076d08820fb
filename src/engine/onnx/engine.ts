// The local engine, in whichever thread hosts it: a loaded decoder, its
// tokenizer and chat template, and the loop that steps active sequences.
// Sequences take turns one step at a time, so a long generation never holds
// up a newer one, and the loop yields to the event loop between steps so
// cancellations and new requests are seen within one step.
import { randomUUID } from 'node:crypto'
import { setImmediate as yieldToEventLoop } from 'node:timers/promises'
import type { FinishReason, GenerateRequest, Usage } from '../backend.ts'
import { ApiError } from '../../errors.ts'
import { ChatTemplate } from './chat-template.ts'
import { DecoderSession } from './decoder-session.ts'
import { readModelDir, type ModelDir, type ModelDtype } from './model-dir.ts'
import type { DeviceChoice } from './ort.ts'
import { Sequence } from './sequence.ts'
import { loadTokenizer, type TextTokenizer } from './tokenizer.ts'

export interface EngineEvents {
  delta (id: string, content: string): void
  finish (id: string, reason: FinishReason, usage: Usage): void
  error (id: string, error: ApiError): void
}

export class LocalEngine {
  readonly model: ModelDir
  readonly session: DecoderSession
  readonly tokenizer: TextTokenizer
  readonly template: ChatTemplate
  private readonly events: EngineEvents
  private readonly active = new Map<string, Sequence>()
  private looping = false

  private constructor (model: ModelDir, session: DecoderSession, tokenizer: TextTokenizer, template: ChatTemplate, events: EngineEvents) {
    this.model = model
    this.session = session
    this.tokenizer = tokenizer
    this.template = template
    this.events = events
  }

  static async load (opts: { modelDir: string; dtype: ModelDtype; device: DeviceChoice; threads: number }, events: EngineEvents): Promise<LocalEngine> {
    const model = readModelDir(opts.modelDir, opts.dtype)
    const tokenizer = await loadTokenizer(opts.modelDir)
    const template = ChatTemplate.fromTokenizerConfig(tokenizer.config, `${opts.modelDir}/tokenizer_config.json`)
    const session = await DecoderSession.load(model, { device: opts.device, threads: opts.threads })
    return new LocalEngine(model, session, tokenizer, template, events)
  }

  get contextLength (): number {
    return this.model.contextLength
  }

  /** The prompt's token ids, exactly as the model will see them. */
  encodePrompt (request: Pick<GenerateRequest, 'messages'>): number[] {
    const rendered = this.template.render(request.messages.map(m => ({ role: m.role, content: m.content })))
    // The template writes BOS itself; letting the tokenizer add one would double it.
    return this.tokenizer.encode(rendered.text, { addSpecialTokens: false })
  }

  /** Validates and queues a request; events for `id` follow. Throws ApiError before any work when it cannot be served. */
  start (request: GenerateRequest, id: string = randomUUID()): string {
    const promptIds = this.encodePrompt(request)
    const room = this.contextLength - promptIds.length
    if (room <= 0 || (request.maxTokens !== undefined && request.maxTokens > room)) {
      const wanted = request.maxTokens ?? 1
      throw new ApiError('context_length_exceeded',
        `This model's context length is ${this.contextLength} tokens; the prompt has ${promptIds.length} and max_tokens asks for ${wanted} more.`,
        { param: request.maxTokens !== undefined && room > 0 ? 'max_tokens' : 'messages' })
    }
    const sequence = new Sequence({
      id,
      promptIds,
      maxNewTokens: request.maxTokens ?? room,
      request,
      tokenizer: this.tokenizer,
      eosIds: this.model.eosTokenIds,
      // Logits past the tokenizer's vocabulary are padding in the output layer.
      validVocab: Math.min(this.tokenizer.vocabSize, this.model.vocabSize),
    })
    this.active.set(id, sequence)
    if (!this.looping) void this.loop()
    return id
  }

  /** Stops a sequence at its next step; it finishes with reason "cancelled". */
  cancel (id: string): void {
    const seq = this.active.get(id)
    if (seq) seq.cancelled = true
  }

  get activeCount (): number {
    return this.active.size
  }

  private async loop (): Promise<void> {
    this.looping = true
    try {
      while (this.active.size > 0) {
        for (const seq of [...this.active.values()]) {
          if (seq.cancelled) {
            this.retire(seq, 'cancelled')
          } else {
            await this.step(seq)
          }
          await yieldToEventLoop()
        }
      }
    } finally {
      this.looping = false
    }
  }

  private async step (seq: Sequence): Promise<void> {
    let result
    try {
      const out = await this.session.forward({
        batch: 1,
        inputIds: [seq.pending],
        attentionMask: [new Array(seq.length).fill(1)],
        positionIds: [seq.pending.map((_, k) => seq.length - seq.pending.length + k)],
        past: seq.cache ?? this.session.emptyCache(1),
        logitsToKeep: 1,
      })
      if (seq.cache) DecoderSession.disposeCache(seq.cache)
      seq.cache = out.present
      const vocab = this.model.vocabSize
      result = seq.advance(out.logits.subarray((out.rows - 1) * vocab, out.rows * vocab))
    } catch (err) {
      this.active.delete(seq.id)
      if (seq.cache) DecoderSession.disposeCache(seq.cache)
      this.events.error(seq.id, new ApiError('internal_error', `inference failed: ${(err as Error).message}`))
      return
    }
    if (result.text) this.events.delta(seq.id, result.text)
    if (result.finish) this.retire(seq, result.finish)
  }

  private retire (seq: Sequence, reason: FinishReason): void {
    this.active.delete(seq.id)
    if (seq.cache) DecoderSession.disposeCache(seq.cache)
    seq.cache = null
    const prompt = seq.promptIds.length
    this.events.finish(seq.id, reason, { prompt_tokens: prompt, completion_tokens: seq.generated, total_tokens: prompt + seq.generated })
  }

  async close (): Promise<void> {
    for (const seq of this.active.values()) seq.cancelled = true
    while (this.looping) await yieldToEventLoop()
    await this.session.close()
  }
}
