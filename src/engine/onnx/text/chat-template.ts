/**
 * Turns chat messages into the model's prompt text by rendering the `chat_template` of
 * tokenizer_config.json with `@huggingface/jinja`, as transformers' `apply_chat_template` does.
 *
 * The rendered text already holds BOS (templates write `bos_token` themselves), so the engine must
 * encode it with `addSpecialTokens: false`.
 */
import { join } from 'node:path'
import { Template } from '@huggingface/jinja'
import { readModelJson, specialTokenContent, type TokenizerConfig } from './tokenizer.ts'

export interface ChatTemplateMessage {
  role: string;
  /** A string, OpenAI-style `{type:'text', text}` parts (templates that know them read them), or
   * null (assistant tool-call turns). */
  content: string | { type: string; text?: string }[] | null;
  [key: string]: unknown;
}

export interface RenderOptions {
  /** Append the template's opening of an assistant turn. Default true: the engine always asks
   * the model for the next assistant message. */
  addGenerationPrompt?: boolean;
  /** Extra template variables (e.g. `tools`), passed through unchanged. */
  variables?: Record<string, unknown>;
}

export interface RenderedPrompt {
  text: string;
  /** The prompt ends inside an open `<think>` block (the template opened it), so the model's
   * output starts as reasoning and may carry only the closing `</think>`. */
  endsInThink: boolean;
}

/**
 * True when the text after the last `<think>` holds no `</think>`: generation continues inside a
 * reasoning block. False when there is no `<think>` at all.
 */
export function endsInsideThinkBlock (text: string): boolean {
  const open = text.lastIndexOf('<think>')
  if (open < 0) return false
  return !text.includes('</think>', open + '<think>'.length)
}

export class ChatTemplate {
  readonly source: string
  readonly bosToken: string
  readonly eosToken: string
  #template: Template
  #origin: string

  /**
   * @param source the Jinja template text
   * @param specials the BOS/EOS strings the template may print (missing ones render as '')
   * @param origin where the template came from, for error messages
   */
  constructor (
    source: string,
    specials: { bosToken?: string | null; eosToken?: string | null } = {},
    origin = 'tokenizer_config.json'
  ) {
    this.source = source
    this.bosToken = specials.bosToken ?? ''
    this.eosToken = specials.eosToken ?? ''
    this.#origin = origin
    try {
      this.#template = new Template(source)
    } catch (err) {
      throw new Error(`${origin}: chat_template does not parse (${(err as Error).message})`, { cause: err })
    }
  }

  /**
   * Builds the template from a parsed tokenizer_config.json. `chat_template` may be a string or a
   * list of named templates (then the one named "default" is used).
   */
  static fromTokenizerConfig (config: TokenizerConfig, origin = 'tokenizer_config.json'): ChatTemplate {
    const source = pickTemplate(config.chat_template, origin)
    return new ChatTemplate(
      source,
      { bosToken: specialTokenContent(config.bos_token), eosToken: specialTokenContent(config.eos_token) },
      origin
    )
  }

  render (messages: readonly ChatTemplateMessage[], options: RenderOptions = {}): RenderedPrompt {
    let text: string
    try {
      text = this.#template.render({
        ...options.variables,
        messages,
        add_generation_prompt: options.addGenerationPrompt ?? true,
        bos_token: this.bosToken,
        eos_token: this.eosToken,
      })
    } catch (err) {
      throw new Error(`${this.#origin}: chat_template failed to render (${(err as Error).message})`, { cause: err })
    }
    return { text, endsInThink: endsInsideThinkBlock(text) }
  }
}

function pickTemplate (value: TokenizerConfig['chat_template'], origin: string): string {
  if (typeof value === 'string' && value.length > 0) return value
  if (Array.isArray(value)) {
    const named = value.find((entry) => entry?.name === 'default')
    if (named && typeof named.template === 'string') return named.template
    throw new Error(`${origin}: chat_template is a list without a template named "default"`)
  }
  throw new Error(`${origin}: no chat_template (this model cannot format chat messages)`)
}

/** Reads the chat template of a model directory's tokenizer_config.json. */
export async function loadChatTemplate (modelDir: string): Promise<ChatTemplate> {
  const path = join(modelDir, 'tokenizer_config.json')
  const config = await readModelJson(path)
  if (config === null || typeof config !== 'object' || Array.isArray(config)) {
    throw new Error(`${path}: expected a JSON object at the top level`)
  }
  return ChatTemplate.fromTokenizerConfig(config as TokenizerConfig, path)
}
