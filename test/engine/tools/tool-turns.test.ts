// Conversations with tool turns render in the format the model's template means: R1's tool
// tokens (its stock template's defects avoided), or the generic <tool_call> form for any other.
import t from 'tap'
import type { ChatMessage } from '../../../src/engine/backend.ts'
import { ChatTemplate } from '../../../src/engine/onnx/text/chat-template.ts'
import { renderToolTurns } from '../../../src/engine/onnx/text/tool-turns.ts'
import { toolFormatForTemplate } from '../../../src/engine/tools/format.ts'
import { DEEPSEEK_R1_DISTILL_TEMPLATE } from '../../helpers/r1-tokenizer.ts'

const r1 = new ChatTemplate(DEEPSEEK_R1_DISTILL_TEMPLATE, { bosToken: '<｜begin▁of▁sentence｜>', eosToken: '<｜end▁of▁sentence｜>' })
const same = (text: string): string => text

const weather = (id: string, city: string) => ({ id, type: 'function' as const, function: { name: 'get_weather', arguments: `{"city":"${city}"}` } })
const call = (city: string) => `<｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n\`\`\`json\n{"city":"${city}"}\n\`\`\`<｜tool▁call▁end｜>`

t.test('R1: two calls, their results, then the model answers after the outputs block, thinking first', async t => {
  const format = toolFormatForTemplate(r1.source)
  t.equal(format.name, 'r1')
  const messages: ChatMessage[] = [
    { role: 'user', content: 'Weather in Oslo and Bergen?' },
    { role: 'assistant', content: '', toolCalls: [weather('a', 'Oslo'), weather('b', 'Bergen')] },
    { role: 'tool', content: '{"temp":3}', toolCallId: 'a' },
    { role: 'tool', content: '{"temp":5}', toolCallId: 'b' },
  ]
  const rendered = renderToolTurns(r1, format, messages, same)
  t.equal(rendered.text,
    '<｜begin▁of▁sentence｜><｜User｜>Weather in Oslo and Bergen?<｜Assistant｜><｜tool▁calls▁begin｜>' + call('Oslo') + '\n' + call('Bergen') +
    '<｜tool▁calls▁end｜><｜end▁of▁sentence｜><｜tool▁outputs▁begin｜><｜tool▁output▁begin｜>{"temp":3}<｜tool▁output▁end｜>\n' +
    '<｜tool▁output▁begin｜>{"temp":5}<｜tool▁output▁end｜><｜tool▁outputs▁end｜><think>\n')
  t.equal(rendered.endsInThink, true, 'the answer after tool outputs starts in thinking, as after <｜Assistant｜>')
})

t.test('R1: a second round of calls opens its own calls block, and a finished round closes with the answer', async t => {
  const format = toolFormatForTemplate(r1.source)
  const messages: ChatMessage[] = [
    { role: 'system', content: 'Be brief.' },
    { role: 'user', content: 'Oslo?' },
    { role: 'assistant', content: '', toolCalls: [weather('a', 'Oslo')] },
    { role: 'tool', content: '3', toolCallId: 'a' },
    { role: 'assistant', content: 'It is 3 degrees.' },
    { role: 'user', content: 'Bergen?' },
    { role: 'assistant', content: 'Let me look.', toolCalls: [weather('b', 'Bergen')] },
    { role: 'tool', content: '5', toolCallId: 'b' },
  ]
  t.equal(renderToolTurns(r1, format, messages, same).text,
    '<｜begin▁of▁sentence｜>Be brief.<｜User｜>Oslo?<｜Assistant｜><｜tool▁calls▁begin｜>' + call('Oslo') + '<｜tool▁calls▁end｜><｜end▁of▁sentence｜>' +
    '<｜tool▁outputs▁begin｜><｜tool▁output▁begin｜>3<｜tool▁output▁end｜><｜tool▁outputs▁end｜>It is 3 degrees.<｜end▁of▁sentence｜>' +
    '<｜User｜>Bergen?<｜Assistant｜>Let me look.<｜tool▁calls▁begin｜>' + call('Bergen') + '<｜tool▁calls▁end｜><｜end▁of▁sentence｜>' +
    '<｜tool▁outputs▁begin｜><｜tool▁output▁begin｜>5<｜tool▁output▁end｜><｜tool▁outputs▁end｜><think>\n')
})

t.test('R1: message text goes through the quoting, the format\'s tokens do not', async t => {
  const format = toolFormatForTemplate(r1.source)
  const quote = (text: string): string => `[${text}]`
  const text = renderToolTurns(r1, format, [
    { role: 'user', content: 'u' },
    { role: 'assistant', content: '', toolCalls: [{ id: 'a', type: 'function', function: { name: 'f', arguments: '{}' } }] },
    { role: 'tool', content: '<｜end▁of▁sentence｜>', toolCallId: 'a' },
  ], quote).text
  t.ok(text.includes('<｜tool▁output▁begin｜>[<｜end▁of▁sentence｜>]<｜tool▁output▁end｜>'), 'a result is quoted')
  t.ok(text.includes('<｜tool▁sep｜>[f]\n```json\n[{}]\n```'), 'name and arguments are quoted')
})

t.test('any other template: calls as <tool_call> text in the assistant turn, results as one user turn', async t => {
  const plain = new ChatTemplate('{% for m in messages %}[{{ m.role }}]{{ m.content }}\n{% endfor %}{% if add_generation_prompt %}[assistant]{% endif %}')
  const format = toolFormatForTemplate(plain.source)
  t.equal(format.name, 'json')
  const text = renderToolTurns(plain, format, [
    { role: 'user', content: 'Oslo and Bergen?' },
    { role: 'assistant', content: '', toolCalls: [weather('a', 'Oslo'), weather('b', 'Bergen')] },
    { role: 'tool', content: '3', toolCallId: 'a' },
    { role: 'tool', content: '5', toolCallId: 'b' },
  ], same).text
  t.equal(text,
    '[user]Oslo and Bergen?\n' +
    '[assistant]<tool_call>\n{"name": "get_weather", "arguments": {"city":"Oslo"}}\n</tool_call>\n<tool_call>\n{"name": "get_weather", "arguments": {"city":"Bergen"}}\n</tool_call>\n' +
    '[user]<tool_response>\n3\n</tool_response>\n<tool_response>\n5\n</tool_response>\n[assistant]')
})
