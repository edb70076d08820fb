import t from 'tap'
import { join } from 'node:path'
import {
  ChatTemplate,
  endsInsideThinkBlock,
  loadChatTemplate,
} from '../../../../src/engine/onnx/text/chat-template.ts'
import { loadTokenizer } from '../../../../src/engine/onnx/text/tokenizer.ts'
import { STORIES_SOURCE } from '../../../helpers/models.ts'

const MODEL_DIR = STORIES_SOURCE

// The chat_template of deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B's tokenizer_config.json, written
// out by hand from the published file. String.raw keeps each `\n` as the two characters the JSON
// holds: inside Jinja string literals they are escapes that render as newlines.
const DEEPSEEK_R1_DISTILL_TEMPLATE = String.raw`{% if not add_generation_prompt is defined %}{% set add_generation_prompt = false %}{% endif %}{% set ns = namespace(is_first=false, is_tool=false, is_output_first=true, system_prompt='') %}{%- for message in messages %}{%- if message['role'] == 'system' %}{% set ns.system_prompt = message['content'] %}{%- endif %}{%- endfor %}{{bos_token}}{{ns.system_prompt}}{%- for message in messages %}{%- if message['role'] == 'user' %}{%- set ns.is_tool = false -%}{{'<｜User｜>' + message['content']}}{%- endif %}{%- if message['role'] == 'assistant' and message['content'] is none %}{%- set ns.is_tool = false -%}{%- for tool in message['tool_calls']%}{%- if not ns.is_first %}{{'<｜Assistant｜><｜tool▁calls▁begin｜><｜tool▁call▁begin｜>' + tool['type'] + '<｜tool▁sep｜>' + tool['function']['name'] + '\n' + '` + '```json' + String.raw`' + '\n' + tool['function']['arguments'] + '\n' + '` + '```' + String.raw`' + '<｜tool▁call▁end｜>'}}{%- set ns.is_first = true -%}{%- else %}{{'\n' + '<｜tool▁call▁begin｜>' + tool['type'] + '<｜tool▁sep｜>' + tool['function']['name'] + '\n' + '` + '```json' + String.raw`' + '\n' + tool['function']['arguments'] + '\n' + '` + '```' + String.raw`' + '<｜tool▁call▁end｜>'}}{{'<｜tool▁calls▁end｜><｜end▁of▁sentence｜>'}}{%- endif %}{%- endfor %}{%- endif %}{%- if message['role'] == 'assistant' and message['content'] is not none %}{%- if ns.is_tool %}{{'<｜tool▁outputs▁end｜>' + message['content'] + '<｜end▁of▁sentence｜>'}}{%- set ns.is_tool = false -%}{%- else %}{% set content = message['content'] %}{% if '</think>' in content %}{% set content = content.split('</think>')[-1] %}{% endif %}{{'<｜Assistant｜>' + content + '<｜end▁of▁sentence｜>'}}{%- endif %}{%- endif %}{%- if message['role'] == 'tool' %}{%- set ns.is_tool = true -%}{%- if ns.is_output_first %}{{'<｜tool▁outputs▁begin｜><｜tool▁output▁begin｜>' + message['content'] + '<｜tool▁output▁end｜>'}}{%- set ns.is_output_first = false %}{%- else %}{{'\n<｜tool▁output▁begin｜>' + message['content'] + '<｜tool▁output▁end｜>'}}{%- endif %}{%- endif %}{%- endfor -%}{% if ns.is_tool %}{{'<｜tool▁outputs▁end｜>'}}{% endif %}{% if add_generation_prompt and not ns.is_tool %}{{'<｜Assistant｜><think>\n'}}{% endif %}`

// The special-token entries of that tokenizer_config.json, in their AddedToken object form.
const DEEPSEEK_CONFIG = {
  bos_token: { __type: 'AddedToken', content: '<｜begin▁of▁sentence｜>', lstrip: false, normalized: true, rstrip: false, single_word: false },
  eos_token: { __type: 'AddedToken', content: '<｜end▁of▁sentence｜>', lstrip: false, normalized: true, rstrip: false, single_word: false },
  chat_template: DEEPSEEK_R1_DISTILL_TEMPLATE,
}

t.test('stories260k template: <s> plus trimmed texts joined by single spaces', async (t) => {
  const template = await loadChatTemplate(MODEL_DIR)
  const rendered = template.render([
    { role: 'system', content: '  Be kind. ' },
    { role: 'user', content: 'Once upon\n' },
    { role: 'assistant', content: [{ type: 'text', text: ' a ' }, { type: 'image_url' }, { type: 'text', text: 'time' }] },
    { role: 'user', content: '   ' },
  ])
  t.equal(rendered.text, '<s>Be kind. Once upon a time')
  t.equal(rendered.endsInThink, false)
  t.equal(template.render([]).text, '<s>', 'no messages: only BOS')

  // The engine encodes the rendered prompt without adding specials: exactly one BOS.
  const tok = await loadTokenizer(MODEL_DIR)
  const ids = tok.encode(template.render([{ role: 'user', content: 'Once upon a time' }]).text, { addSpecialTokens: false })
  t.same(ids, [1, 403, 407, 261, 378])
})

t.test('DeepSeek-R1-Distill template', async (t) => {
  const template = ChatTemplate.fromTokenizerConfig(DEEPSEEK_CONFIG)
  t.equal(template.bosToken, '<｜begin▁of▁sentence｜>')
  t.equal(template.eosToken, '<｜end▁of▁sentence｜>')

  const single = template.render([{ role: 'user', content: 'What is 2+2?' }])
  t.equal(single.text, '<｜begin▁of▁sentence｜><｜User｜>What is 2+2?<｜Assistant｜><think>\n')
  t.equal(single.endsInThink, true, 'generation prompt opens a think block')

  const messages = [
    { role: 'system', content: 'You are helpful.' },
    { role: 'user', content: 'Hi' },
    { role: 'assistant', content: '<think>\nThe user greets me.\n</think>\n\nHello!' },
    { role: 'user', content: 'What is 2+2?' },
  ]
  const multi = template.render(messages)
  t.equal(
    multi.text,
    '<｜begin▁of▁sentence｜>You are helpful.<｜User｜>Hi<｜Assistant｜>\n\nHello!<｜end▁of▁sentence｜>' +
      '<｜User｜>What is 2+2?<｜Assistant｜><think>\n',
    'system first, earlier reasoning stripped, generation prompt last'
  )
  t.equal(multi.endsInThink, true)

  const toolTurn = template.render([
    { role: 'user', content: 'Weather?' },
    { role: 'assistant', content: null, tool_calls: [{ type: 'function', function: { name: 'get_weather', arguments: '{"city":"Oslo"}' } }] },
    { role: 'tool', content: '{"temp":3}' },
  ])
  t.equal(
    toolTurn.text,
    '<｜begin▁of▁sentence｜><｜User｜>Weather?<｜Assistant｜><｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n' +
      '```json\n{"city":"Oslo"}\n```<｜tool▁call▁end｜><｜tool▁outputs▁begin｜><｜tool▁output▁begin｜>{"temp":3}<｜tool▁output▁end｜><｜tool▁outputs▁end｜>',
    'tool turns render; no generation prompt after tool output (as the template does)'
  )

  const noPrompt = template.render(messages, { addGenerationPrompt: false })
  t.ok(noPrompt.text.endsWith('<｜User｜>What is 2+2?'))
  t.equal(noPrompt.endsInThink, false)
})

t.test('endsInsideThinkBlock', async (t) => {
  t.equal(endsInsideThinkBlock('abc'), false)
  t.equal(endsInsideThinkBlock('<｜Assistant｜><think>\n'), true)
  t.equal(endsInsideThinkBlock('<think>x</think>answer'), false)
  t.equal(endsInsideThinkBlock('<think>x</think><think>y'), true)
  t.equal(endsInsideThinkBlock('</think><think>'), true)
})

t.test('errors name tokenizer_config.json', async (t) => {
  t.throws(() => ChatTemplate.fromTokenizerConfig({ bos_token: '<s>' }), /tokenizer_config\.json: no chat_template/)
  t.throws(() => ChatTemplate.fromTokenizerConfig({ chat_template: '{% if %}' }), /tokenizer_config\.json: chat_template does not parse/)
  const dir = t.testdir({
    plain: { 'tokenizer_config.json': JSON.stringify({ bos_token: '<s>' }) },
    named: {
      'tokenizer_config.json': JSON.stringify({
        bos_token: '<s>',
        chat_template: [{ name: 'tool_use', template: 'T' }, { name: 'default', template: '{{ bos_token }}D' }],
      }),
    },
  })
  await t.rejects(loadChatTemplate(join(dir, 'plain')), /plain\/tokenizer_config\.json: no chat_template/)
  await t.rejects(loadChatTemplate(join(dir, 'absent')), /absent\/tokenizer_config\.json: file not found/)
  t.equal((await loadChatTemplate(join(dir, 'named'))).render([]).text, '<s>D', 'list form uses "default"')
  const failing = new ChatTemplate("{{ raise_exception('nope') }}")
  t.throws(() => failing.render([]), /tokenizer_config\.json: chat_template failed to render/)
})
