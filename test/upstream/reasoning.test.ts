// Reasoning through the upstream path: an upstream that writes <think> inline
// (split across its chunks at every position), one whose template opened the
// block (startsInReasoning), and ones that separate the thinking themselves
// (reasoning_content, reasoning); each reaches the client per the model's
// reasoning mode.

import t, { type Test } from 'tap'
import { UpstreamBackend, type UpstreamBackendOptions } from '../../src/engine/upstream/backend.ts'
import type { ReasoningMode } from '../../src/engine/models-file.ts'
import { buildTestApp } from '../helpers/app.ts'
import { loopbackServer, streamReply } from './loopback.ts'

const CHAT = '/api/v1/chat/completions'

/** An app with one upstream model per reasoning mode, all behind one scripted upstream that streams `nextReply`'s deltas. */
async function setup (t: Test, opts: Partial<UpstreamBackendOptions> = {}) {
  const state: { reply: Array<Record<string, unknown>>; finish: string } = { reply: [], finish: 'stop' }
  const upstream = await loopbackServer(t, (_req, res) => streamReply(res, state.reply, { finish: state.finish }))
  const modes: ReasoningMode[] = ['separate', 'inline', 'hidden']
  const backends = modes.map(mode => {
    const backend = new UpstreamBackend({ id: mode, baseUrl: upstream.url, upstreamModel: 'r1', ...opts })
    t.teardown(() => backend.close())
    return { backend, reasoning: mode }
  })
  const { app, auth } = await buildTestApp(t, { backends })
  const ask = async (mode: ReasoningMode, stream = false) => {
    const res = await app.inject({ method: 'POST', url: CHAT, headers: auth, payload: { model: mode, messages: [{ role: 'user', content: '2+2?' }], stream } })
    if (res.statusCode !== 200) throw new Error(res.body)
    return res
  }
  return { state, ask }
}

function streamedDeltas (body: string): Array<Record<string, string>> {
  return body.split('\n\n').filter(f => f.startsWith('data: {')).map(f => JSON.parse(f.slice(6))).slice(1).filter(c => c.choices[0]?.finish_reason === null).map(c => c.choices[0].delta)
}

t.test('<think> inline, split across the upstream\'s chunks at every position', async t => {
  const { state, ask } = await setup(t)
  const text = '<think>Let me see.</think>\n\nIt is 4.'
  const splits: string[][] = [[...text]]
  for (let i = 1; i < text.length; i++) splits.push([text.slice(0, i), text.slice(i)])
  let bad = 0
  for (const pieces of splits) {
    state.reply = pieces.map(content => ({ content }))
    const message = (await ask('separate')).json().choices[0].message
    if (message.content !== 'It is 4.' || message.reasoning_content !== 'Let me see.') {
      bad++
      t.same(message, { role: 'assistant', content: 'It is 4.', reasoning_content: 'Let me see.' }, JSON.stringify(pieces))
    }
  }
  t.equal(bad, 0, `all ${splits.length} splits separate the same way`)

  state.reply = [...text].map(content => ({ content }))
  t.same((await ask('hidden')).json().choices[0].message, { role: 'assistant', content: 'It is 4.' })
  t.same((await ask('inline')).json().choices[0].message, { role: 'assistant', content: 'Let me see.</think>\n\nIt is 4.' }, 'inline: as written, the block closed by </think>')
  const deltas = streamedDeltas((await ask('separate', true)).body)
  t.equal(deltas.map(d => d.reasoning_content ?? '').join(''), 'Let me see.')
  t.equal(deltas.map(d => d.content ?? '').join(''), 'It is 4.')
  t.ok(deltas.findIndex(d => d.content) > deltas.findLastIndex(d => d.reasoning_content), 'the thinking streams before the answer')
})

t.test('startsInReasoning: an upstream whose template opened the block sends only </think>', async t => {
  const { state, ask } = await setup(t, { startsInReasoning: true })
  state.reply = [{ content: 'Two and two' }, { content: '.</thi' }, { content: 'nk>\n\n4' }]
  t.same((await ask('separate')).json().choices[0].message, { role: 'assistant', content: '4', reasoning_content: 'Two and two.' })
})

t.test('without startsInReasoning, text without <think> is all answer', async t => {
  const { state, ask } = await setup(t)
  state.reply = [{ content: 'Once upon a time, a < b.' }]
  t.same((await ask('separate')).json().choices[0].message, { role: 'assistant', content: 'Once upon a time, a < b.' })
  state.reply = [{ reasoning: { effort: 'high' }, content: 'Plain.' }]
  t.same((await ask('separate')).json().choices[0].message, { role: 'assistant', content: 'Plain.' }, 'a reasoning field that is not text is ignored')
})

t.test('a block never closed: all reasoning, finish_reason says why it ended', async t => {
  const { state, ask } = await setup(t)
  state.reply = [{ content: '<think>Hmm, ' }, { content: 'and then' }]
  state.finish = 'length'
  const res = (await ask('separate')).json()
  t.same(res.choices[0], { index: 0, message: { role: 'assistant', content: '', reasoning_content: 'Hmm, and then' }, finish_reason: 'length' })
  t.same((await ask('hidden')).json().choices[0].message, { role: 'assistant', content: '' })
})

t.test('upstreams that separate the thinking themselves: reasoning_content and reasoning', async t => {
  const { state, ask } = await setup(t, { startsInReasoning: true })
  for (const field of ['reasoning_content', 'reasoning']) {
    state.reply = [{ [field]: 'Two' }, { [field]: ' and two.' }, { content: '\n\nIt is 4.' }]
    t.same((await ask('separate')).json().choices[0].message, { role: 'assistant', content: 'It is 4.', reasoning_content: 'Two and two.' }, `${field}; startsInReasoning does not apply`)
    t.same((await ask('hidden')).json().choices[0].message, { role: 'assistant', content: 'It is 4.' })
    t.same((await ask('inline')).json().choices[0].message, { role: 'assistant', content: 'Two and two.</think>\n\nIt is 4.' })
    t.same(streamedDeltas((await ask('separate', true)).body), [{ reasoning_content: 'Two' }, { reasoning_content: ' and two.' }, { content: 'It is 4.' }])
  }
})
