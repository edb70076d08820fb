// Models whose authors advise against a system prompt (DeepSeek's R1
// distills) get chatd's instruction, and any system message the client sent,
// at the start of the first user turn (models.json `systemPrompt: "user"`).
import { readFileSync } from 'node:fs'
import t from 'tap'
import { ChatTemplate } from '../../src/engine/onnx/text/chat-template.ts'
import { parseModelsFile } from '../../src/engine/models-file.ts'
import { placeInFirstUserTurn, shapeConversation } from '../../src/prompt/shape.ts'
import { buildTestApp, chatBody } from '../helpers/app.ts'
import { r1TokenizerFiles } from '../helpers/r1-tokenizer.ts'
import { ScriptedBackend } from '../helpers/scripted-backend.ts'

const r1 = ChatTemplate.fromTokenizerConfig(r1TokenizerFiles().config as never)
const BOS = '<｜begin▁of▁sentence｜>'

t.test('placeInFirstUserTurn: system messages and the instruction open the first user turn', async t => {
  t.same(placeInFirstUserTurn([{ role: 'user', content: 'Hi' }], 'Answer in French.'), [{ role: 'user', content: 'Answer in French.\n\nHi' }])
  t.same(placeInFirstUserTurn([
    { role: 'system', content: 'Be brief.' },
    { role: 'user', content: 'Q1' },
    { role: 'assistant', content: 'A1' },
    { role: 'system', content: 'Late rule.' },
    { role: 'user', content: 'Q2' },
  ], 'Answer in French.'), [
    { role: 'user', content: 'Be brief.\n\nLate rule.\n\nAnswer in French.\n\nQ1' },
    { role: 'assistant', content: 'A1' },
    { role: 'user', content: 'Q2' },
  ], 'every system message, in order, then the instruction; later turns untouched')
  t.same(placeInFirstUserTurn([{ role: 'user', content: 'Hi' }], ''), [{ role: 'user', content: 'Hi' }], 'nothing to place: untouched')
  t.same(placeInFirstUserTurn([{ role: 'system', content: 'S' }, { role: 'assistant', content: 'A' }], 'X'),
    [{ role: 'user', content: 'S\n\nX' }, { role: 'assistant', content: 'A' }], 'no user turn: one of its own at the start')
})

t.test('rendered with R1\'s own chat template: nothing between BOS and the first user turn', async t => {
  const conversation = [
    { role: 'system' as const, content: 'You are terse.' },
    { role: 'user' as const, content: 'What is 2+2?' },
    { role: 'assistant' as const, content: '<think>\nadd\n</think>\n\n4' },
    { role: 'user' as const, content: 'And 3+3?' },
  ]
  const texts = ['Answer in German.', '']
  const asUser = r1.render(shapeConversation(conversation, texts, 'user').map(m => ({ ...m }))).text
  t.equal(asUser, `${BOS}<｜User｜>You are terse.\n\nAnswer in German.\n\nWhat is 2+2?<｜Assistant｜>4<｜end▁of▁sentence｜><｜User｜>And 3+3?<｜Assistant｜><think>\n`)
  // The default placement, for contrast: R1's template puts the system text before the first turn.
  const asSystem = r1.render(shapeConversation(conversation, texts, 'system').map(m => ({ ...m }))).text
  t.ok(asSystem.startsWith(`${BOS}You are terse.\n\nAnswer in German.<｜User｜>What is 2+2?`), asSystem.slice(0, 80))
})

t.test('through the endpoint: a model with systemPrompt "user" never receives a system message', async t => {
  const backend = new ScriptedBackend()
  const { app, auth } = await buildTestApp(t, { backends: [{ backend, systemPrompt: 'user' }] })
  const res = await app.inject({
    method: 'POST',
    url: '/api/v1/chat/completions',
    headers: auth,
    payload: chatBody({ messages: [{ role: 'system', content: 'Be kind.' }, { role: 'user', content: 'Tell me a story' }], language: 'fr', wordcount: 30 }),
  })
  t.equal(res.statusCode, 200)
  t.same(backend.lastRequest?.messages, [{ role: 'user', content: 'Be kind.\n\nAnswer in French. Keep the answer to about 30 words.\n\nTell me a story' }])
})

t.test('the shipped models.json puts the deepseek model\'s instructions in the user turn', async t => {
  const text = readFileSync(new URL('../../models/models.json', import.meta.url), 'utf8')
  const deepseek = parseModelsFile(text, {}).find(p => p.entry.id === 'deepseek-r1-distill-qwen-1.5b')
  t.equal(deepseek?.entry.systemPrompt, 'user')
  t.throws(() => parseModelsFile(JSON.stringify({ models: [{ id: 'a', backend: 'onnx', path: 'a', systemPrompt: 'first' }] }), {}), /"systemPrompt"/)
})
