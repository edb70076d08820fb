// A request's way into the local engine, before the scheduler takes it: its
// prompt rendered with the model's template and encoded (refused as soon as it
// is shown to fill the context: encoding a megabyte of text takes seconds on
// the engine's thread), its limits checked (logit_bias ids in the vocabulary,
// the reply's room in the context and in the tier's minute), and the sequence
// made with what constrains it (a JSON response_format's grammar, a forced
// tool call in the template's own form) and reasoning_effort's thinking budget.
// engine.ts queues what this returns and schedules it.
import { jsonFormatOf, type GenerateRequest } from '../../backend.ts'
import { ApiError } from '../../../errors.ts'
import { argumentsFormat, forcedCallTools } from '../../tools/forced-call.ts'
import { toolFormatForTemplate } from '../../tools/format.ts'
import type { ModelDir } from '../model-dir.ts'
import type { Constraint } from '../grammar/grammar.ts'
import type { GrammarClient } from '../grammar/grammar-client.ts'
import { ForcedText } from '../grammar/forced-text.ts'
import { ToolCallConstraint } from '../grammar/tool-call-constraint.ts'
import { effortBudget } from '../sampling/reasoning-effort.ts'
import { encodeChatPrompt, type EncodedPrompt } from '../text/chat-prompt.ts'
import type { ChatTemplate } from '../text/chat-template.ts'
import { PromptTooLong } from '../text/quoted-encoding.ts'
import type { TokenTable } from '../text/token-bytes.ts'
import type { TextTokenizer } from '../text/tokenizer.ts'
import { Sequence } from './sequence.ts'

export interface IntakeSettings {
  model: ModelDir
  tokenizer: TextTokenizer
  template: ChatTemplate
  tokens: TokenTable
  /** Where a constrained sequence's matcher lives (its scope's grammar worker). */
  grammars: GrammarClient
  /** Prompt plus generated tokens one sequence may hold (the engine's contextLength). */
  contextLength: number
}

export class RequestIntake {
  readonly model: ModelDir
  readonly tokenizer: TextTokenizer
  readonly template: ChatTemplate
  readonly tokens: TokenTable
  readonly grammars: GrammarClient
  readonly #contextLength: number
  /** The ids of a forced tool call's fixed text; made on the first such call. */
  #forcedText: ForcedText | undefined
  /** The ids of `</think>`, forced when a thinking budget is spent; encoded on first use. */
  #closeThinkingIds: number[] | undefined

  constructor (settings: IntakeSettings) {
    this.model = settings.model
    this.tokenizer = settings.tokenizer
    this.template = settings.template
    this.tokens = settings.tokens
    this.grammars = settings.grammars
    this.#contextLength = settings.contextLength
  }

  /**
   * The prompt's ids, and whether the template left it inside an open <think> block. With
   * `maxTokens`, throws PromptTooLong once the prompt is shown to need more.
   */
  renderPrompt (request: Pick<GenerateRequest, 'messages'>, maxTokens?: number): EncodedPrompt {
    // Message text never becomes control tokens (no prompt-template injection): chat-prompt.ts.
    return encodeChatPrompt(this.template, this.tokenizer, request.messages, maxTokens)
  }

  /**
   * The prompt, refused with context_length_exceeded as soon as it is shown to fill the context:
   * encoding a megabyte of text takes seconds on this thread, during which every sequence of
   * the model waits, and a prompt that cannot fit is not worth them.
   */
  #renderWithinContext (request: GenerateRequest): EncodedPrompt {
    try {
      return this.renderPrompt(request, this.#contextLength - 1)
    } catch (err) {
      if (!(err instanceof PromptTooLong)) throw err
      throw new ApiError('context_length_exceeded',
        `This model's context length is ${this.#contextLength} tokens; the prompt has at least ${err.atLeast}.`, { param: 'messages' })
    }
  }

  /** The request's sequence, checked and made ready to queue; throws ApiError before any work when it cannot be served. */
  sequence (request: GenerateRequest, id: string): Sequence {
    const vocab = Math.min(this.tokenizer.vocabSize, this.model.vocabSize)
    for (const key of Object.keys(request.logitBias ?? {})) {
      if (!(Number(key) < vocab)) throw new ApiError('invalid_parameter', `Token id ${key} is not in this model's vocabulary (ids 0 to ${vocab - 1}).`, { param: 'logit_bias' })
    }
    const { ids: promptIds, endsInThink } = this.#renderWithinContext(request)
    const room = this.#contextLength - promptIds.length
    if (room <= 0 || (request.maxTokens !== undefined && request.maxTokens > room)) {
      const wanted = request.maxTokens ?? 1
      throw new ApiError('context_length_exceeded',
        `This model's context length is ${this.#contextLength} tokens; the prompt has ${promptIds.length} and the reply asks for up to ${wanted} more.`,
        { param: request.maxTokens !== undefined && room > 0 ? 'max_tokens' : 'messages' })
    }
    // The budget for prompt and reply together (the tier's minute): the reply stops where it ends.
    const budget = request.maxTotalTokens === undefined ? Infinity : request.maxTotalTokens - promptIds.length
    if (budget < 1) {
      throw new ApiError('invalid_parameter',
        `The prompt alone (${promptIds.length} tokens) leaves no room for a reply within this request's budget of ${request.maxTotalTokens} tokens (the tier's tokens per minute); shorten the prompt.`,
        { param: 'messages' })
    }
    const maxNewTokens = Math.min(request.maxTokens ?? room, budget)
    return new Sequence({
      id,
      promptIds,
      maxNewTokens,
      request,
      tokenizer: this.tokenizer,
      eosIds: this.model.eosTokenIds,
      // Logits past the tokenizer's vocabulary are padding in the output layer.
      validVocab: Math.min(this.tokenizer.vocabSize, this.model.vocabSize),
      startsInReasoning: endsInThink,
      tokens: this.tokens,
      ...this.#constraintOf(request),
      ...this.#effortOf(request, maxNewTokens),
    })
  }

  #closeThinking (): number[] {
    this.#closeThinkingIds ??= this.tokenizer.encode('</think>', { addSpecialTokens: false })
    return this.#closeThinkingIds
  }

  /** reasoning_effort's thinking budget and the ids that close the block when it is spent. */
  #effortOf (request: GenerateRequest, maxNewTokens: number): { effortBudget?: number; closeThinking?: number[] } {
    const budget = effortBudget(request.reasoningEffort, maxNewTokens)
    if (budget === undefined) return {}
    return { effortBudget: budget, closeThinking: this.#closeThinking() }
  }

  /** A JSON response_format's grammar or a forced tool call's (compiled in the grammar worker for the request's scope), and the ids that close a thinking block at its budget. */
  #constraintOf (request: GenerateRequest): { constraint?: Promise<Constraint>; closeThinking?: number[] } {
    const scope = request.grammarScope ?? ''
    const json = jsonFormatOf(request.responseFormat)
    const tools = forcedCallTools(request.tools, request.toolChoice)
    let constraint: Constraint
    if (tools) {
      // tool_choice required or a named tool: the call in the template's own form, its arguments under the tool's grammar.
      const form = toolFormatForTemplate(this.template.source).forced
      const vocab = Math.min(this.tokenizer.vocabSize, this.model.vocabSize)
      this.#forcedText ??= new ForcedText(this.tokens, vocab, this.tokenizer.specialTokenIds)
      const forced = this.#forcedText
      const encode = (text: string): number[] => forced.ids(text)
      constraint = new ToolCallConstraint({
        open: encode(form.open),
        names: tools.map(tool => ({ ids: encode(tool.function.name + form.afterName), arguments: () => this.grammars.constraint(argumentsFormat(tool), scope) })),
        close: encode(form.close),
        stopIds: this.model.eosTokenIds,
        vocab,
      })
    } else if (json) {
      constraint = this.grammars.constraint(json, scope)
    } else {
      return {}
    }
    return {
      constraint: Promise.resolve(constraint),
      ...(request.thinkingBudget ? { closeThinking: this.#closeThinking() } : {}),
    }
  }
}
