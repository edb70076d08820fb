// language, tone and wordcount: the exact instruction each combination
// produces, that defaults produce none, where the instruction goes, the token
// budget a wordcount sets, and the 400s for values that name nothing.

import { readFileSync } from 'node:fs'
import t from 'tap'
import { toGenerateRequest } from '../../src/api/pipeline/generate-request.ts'
import type { CompletionRequest } from '../../src/api/pipeline/request.ts'
import { TOKENS_PER_WORD, wordcountBudget } from '../../src/prompt/budget.ts'
import { controlInstruction } from '../../src/prompt/controls.ts'
import { resolveLanguage } from '../../src/prompt/languages.ts'
import { placeSystemText, shapeConversation } from '../../src/prompt/shape.ts'
import { TONES } from '../../src/prompt/tones.ts'
import { buildTestApp, chatBody } from '../helpers/app.ts'
import { ScriptedBackend } from '../helpers/scripted-backend.ts'

/** Each tone's sentence, written out so that a change of wording is a visible change of this test. */
const TONE_SENTENCES: Record<string, string> = {
  Default: '',
  Formal: 'Write in a formal tone, without slang or contractions.',
  Professional: 'Write in a professional, businesslike tone.',
  Casual: 'Write in a casual, conversational tone.',
  Friendly: 'Write in a warm, friendly tone.',
  Academic: 'Write in an academic tone: precise, objective and well structured.',
  Technical: 'Write in a technical tone: exact terms and details, no filler.',
  Simple: 'Write in plain, simple words that a beginner can follow.',
  Humorous: 'Write in a light, humorous tone.',
  Persuasive: 'Write in a persuasive tone that argues for the answer.',
  Empathetic: 'Write in an empathetic, supportive tone.',
  Enthusiastic: 'Write in an enthusiastic, upbeat tone.',
  Neutral: 'Write in a neutral, matter-of-fact tone.',
}

t.test('defaults produce no instruction', async t => {
  for (const controls of [
    {},
    { language: 'English', tone: 'Default', wordcount: 'Default' as const },
    { language: 'en' },
    { language: ' english ' },
    { language: 'en-GB' },
    { tone: 'default' },
    { wordcount: 'Default' as const },
  ]) {
    t.equal(controlInstruction(controls), '', JSON.stringify(controls))
  }
})

t.test('every combination of language, tone and wordcount, exactly', async t => {
  const languages: Array<[string | undefined, string]> = [[undefined, ''], ['English', ''], ['fr', 'Answer in French.'], ['Japanese', 'Answer in Japanese.']]
  const wordcounts: Array<['Default' | number | undefined, string]> = [[undefined, ''], ['Default', ''], [1, 'Keep the answer to about 1 word.'], [250, 'Keep the answer to about 250 words.']]
  t.same(Object.keys(TONES), Object.keys(TONE_SENTENCES), 'the documented set of tones')
  let checked = 0
  for (const [language, languageText] of languages) {
    for (const [tone, toneText] of Object.entries(TONE_SENTENCES)) {
      for (const [wordcount, lengthText] of wordcounts) {
        const expected = [languageText, toneText, lengthText].filter(Boolean).join(' ')
        const got = controlInstruction({ language, tone, wordcount })
        if (got !== expected) t.equal(got, expected, JSON.stringify({ language, tone, wordcount }))
        checked++
      }
    }
  }
  t.equal(checked, 4 * 13 * 4)
  t.equal(controlInstruction({ language: 'de', tone: 'Formal', wordcount: 100 }),
    'Answer in German. Write in a formal tone, without slang or contractions. Keep the answer to about 100 words.')
  t.equal(controlInstruction({ tone: 'HUMOROUS' }), 'Write in a light, humorous tone.', 'tones in any letter case')
})

t.test('languages: English names and ISO 639-1 codes, tags by their first part', async t => {
  const cases: Array<[string, string | undefined]> = [
    ['fr', 'French'], ['FR', 'French'], ['french', 'French'], ['pt-BR', 'Portuguese'], ['zh_Hant', 'Chinese'], ['zh', 'Chinese'],
    ['Farsi', 'Persian'], ['fa', 'Persian'], ['Norwegian Bokmal', 'Norwegian Bokmal'], ['sw', 'Swahili'], ['Scottish  Gaelic', 'Scottish Gaelic'],
    ['Klingon', undefined], ['xx', undefined], ['français', undefined], ['', undefined], ['e', undefined],
  ]
  for (const [value, name] of cases) t.equal(resolveLanguage(value), name, value)
})

t.test('values that name nothing: 400 naming the field', async t => {
  t.throws(() => controlInstruction({ language: 'Klingon' }), { code: 'invalid_parameter', param: 'language', message: /Unknown language "Klingon": give its English name .* or its ISO 639-1 code/ })
  t.throws(() => controlInstruction({ tone: 'Sarcastic' }), { code: 'invalid_parameter', param: 'tone', message: /Unknown tone "Sarcastic"; one of: Default, Formal, Professional/ })

  const { app, auth } = await buildTestApp(t)
  for (const [patch, param] of [[{ language: 'Klingon' }, 'language'], [{ tone: 'Sarcastic' }, 'tone'], [{ wordcount: 0 }, 'wordcount'], [{ wordcount: 'long' }, 'wordcount']] as const) {
    const res = await app.inject({ method: 'POST', url: '/api/v1/chat/completions', headers: auth, payload: chatBody(patch) })
    t.equal(res.statusCode, 400, JSON.stringify(patch))
    t.equal(res.json().error.param, param)
    t.equal(res.json().error.code, 'invalid_parameter')
  }
})

t.test('placement: before the conversation, after the client\'s system message, in it', async t => {
  const user = { role: 'user' as const, content: 'Hi' }
  t.same(placeSystemText([user], 'Answer in French.'), [{ role: 'system', content: 'Answer in French.' }, user], 'a new system message when the client sent none')
  t.same(placeSystemText([{ role: 'system', content: 'Be brief.' }, user], 'Answer in French.'), [{ role: 'system', content: 'Be brief.\n\nAnswer in French.' }, user], 'appended to the client\'s (templates keep one system message)')
  t.same(placeSystemText([{ role: 'system', content: 'A' }, { role: 'system', content: 'B' }, user, { role: 'system', content: 'late' }], 'X'),
    [{ role: 'system', content: 'A' }, { role: 'system', content: 'B\n\nX' }, user, { role: 'system', content: 'late' }], 'after the last leading system message')
  t.same(placeSystemText([user], ''), [user], 'nothing to place: untouched')
})

t.test('earlier assistant turns lose their thinking; the last user turn is untouched', async t => {
  t.same(shapeConversation([
    { role: 'user', content: 'Q1 <think>user text is not touched</think>' },
    { role: 'assistant', content: '<think>\nreasoning\n</think>\n\nA1' },
    { role: 'assistant', content: 'only closed</think> A2' },
    { role: 'user', content: 'Q2' },
  ], ['', '']), [
    { role: 'user', content: 'Q1 <think>user text is not touched</think>' },
    { role: 'assistant', content: 'A1' },
    { role: 'assistant', content: 'A2' },
    { role: 'user', content: 'Q2' },
  ])
})

t.test('wordcount budget: words x2 plus the thinking allowance, capped by the context', async t => {
  const messages = [{ role: 'user' as const, content: 'Hi' }]
  t.equal(TOKENS_PER_WORD, 2)
  t.equal(wordcountBudget({ wordcount: 100, thinkingBudget: 0, messages }), 200)
  t.equal(wordcountBudget({ wordcount: 100, thinkingBudget: 2048, messages }), 2248, 'room for a reasoning model\'s thinking')
  // 'Hi' is 2 bytes + 16 for the template: 512 - 18 = 494 tokens surely free.
  t.equal(wordcountBudget({ wordcount: 1000, thinkingBudget: 0, contextLength: 512, messages }), 494, 'never more than the context leaves')
  t.equal(wordcountBudget({ wordcount: 10, thinkingBudget: 0, contextLength: 512, messages }), 20)
  t.equal(wordcountBudget({ wordcount: 10, thinkingBudget: 0, contextLength: 10, messages }), undefined, 'no room: no promise')
})

t.test('through the endpoint: instruction, budget, max_tokens wins', async t => {
  const backend = new ScriptedBackend()
  const { app, auth } = await buildTestApp(t, { backends: [backend] })
  const send = (patch: Record<string, unknown>) => app.inject({ method: 'POST', url: '/api/v1/chat/completions', headers: auth, payload: chatBody(patch) })

  t.equal((await send({ language: 'es', tone: 'Friendly', wordcount: 50 })).statusCode, 200)
  t.same(backend.lastRequest?.messages, [
    { role: 'system', content: 'Answer in Spanish. Write in a warm, friendly tone. Keep the answer to about 50 words.' },
    { role: 'user', content: 'Tell me a story' },
  ])
  t.equal(backend.lastRequest?.maxTokens, 100, 'wordcount sets the budget when max_tokens is absent')

  await send({ wordcount: 50, max_tokens: 7 })
  t.equal(backend.lastRequest?.maxTokens, 7, 'max_tokens wins')
  await send({ language: 'English', tone: 'Default', wordcount: 'Default' })
  t.same(backend.lastRequest?.messages, [{ role: 'user', content: 'Tell me a story' }], 'defaults: the conversation as sent')
  t.equal(backend.lastRequest?.maxTokens, undefined)
})

t.test('a reasoning model\'s thinking budget is added to the wordcount budget', async t => {
  const body = { model: 'm', messages: [{ role: 'user', content: 'Why?' }], wordcount: 20 } as CompletionRequest
  t.equal(toGenerateRequest(body, { thinkingBudget: 1024 }).maxTokens, 1064)
  t.equal(toGenerateRequest(body).maxTokens, 40)
})

t.test('docs/api.md documents every tone with its wording', async t => {
  const doc = readFileSync(new URL('../../docs/api.md', import.meta.url), 'utf8')
  for (const [tone, sentence] of Object.entries(TONE_SENTENCES)) {
    if (sentence === '') continue
    t.ok(doc.includes(`| ${tone} | ${sentence} |`), `${tone} in docs/api.md`)
  }
})
