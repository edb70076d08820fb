// Token log-probabilities (`logprobs`, `top_logprobs`) end to end on the real
// stories260k model: the values form a distribution (the listed alternatives
// never hold more than all of it), greedy decoding picks the most likely
// token, a token's own logprob is its entry among the alternatives, each
// streamed chunk carries exactly the tokens whose text it carries, and the
// stream's lists join into the whole reply's. The official openai client reads
// them.
import t, { type Test } from 'tap'
import OpenAI from 'openai'
import { startStoriesServer } from '../helpers/stories-server.ts'

const MODEL = 'stories260k'
const KEY = `sk-chatd-${'logProbs'.repeat(4)}`
const server = await startStoriesServer(t, { modelId: MODEL, key: KEY })
const client = new OpenAI({ apiKey: KEY, baseURL: `${server.url}/api/v1`, maxRetries: 0 })
const auth = { authorization: `Bearer ${KEY}` }
const messages = [{ role: 'user' as const, content: 'Once upon a time, there was a little dog' }]

interface Top { token: string; logprob: number; bytes: number[] | null }
interface Entry extends Top { top_logprobs: Top[] }

const text = (bytes: number[][]): string => Buffer.from(bytes.flat()).toString('utf8')

async function post (body: Record<string, unknown>) {
  return await server.app.inject({ method: 'POST', url: '/api/v1/chat/completions', headers: auth, payload: { model: MODEL, messages, ...body } })
}

/** The checks every list of entries must pass. */
function checkEntries (t: Test, entries: Entry[], opts: { top: number; greedy: boolean }): void {
  for (const [i, entry] of entries.entries()) {
    t.ok(entry.logprob <= 0, `token ${i}: a log-probability (${entry.logprob})`)
    t.equal(entry.top_logprobs.length, opts.top, `token ${i}: ${opts.top} alternatives`)
    const mass = entry.top_logprobs.reduce((sum, alt) => sum + Math.exp(alt.logprob), 0)
    if (mass > 1 + 1e-9) t.fail(`token ${i}: the alternatives hold ${mass} > 1 of the probability`)
    for (let k = 1; k < entry.top_logprobs.length; k++) {
      if (entry.top_logprobs[k].logprob > entry.top_logprobs[k - 1].logprob) t.fail(`token ${i}: alternatives out of order`)
    }
    const self = entry.top_logprobs.find(alt => alt.token === entry.token && JSON.stringify(alt.bytes) === JSON.stringify(entry.bytes))
    if (self && self.logprob !== entry.logprob) t.fail(`token ${i}: its logprob ${entry.logprob} differs from its entry among the alternatives ${self.logprob}`)
    if (opts.greedy && opts.top > 0) {
      if (entry.top_logprobs[0].token !== entry.token || entry.top_logprobs[0].logprob !== entry.logprob) t.fail(`token ${i}: greedy did not pick the most likely token`)
    }
    t.same(Buffer.from(entry.bytes ?? []).toString('utf8').replaceAll('\uFFFD', ''), entry.token.replaceAll('\uFFFD', ''), `token ${i}: token is its bytes as text`)
  }
}

t.test('greedy: a distribution, the top token chosen, each token\'s text and bytes', async t => {
  const res = await post({ temperature: 0, max_tokens: 40, logprobs: true, top_logprobs: 5 })
  t.equal(res.statusCode, 200)
  const choice = res.json().choices[0]
  const entries = choice.logprobs.content as Entry[]
  t.equal(entries.length, res.json().usage.completion_tokens, 'one entry per generated token')
  checkEntries(t, entries, { top: 5, greedy: true })
  t.equal(text(entries.map(e => e.bytes ?? [])), choice.message.content, 'the tokens\' bytes spell the reply')
  t.notOk('reasoning_content' in choice.logprobs, 'no thinking, no thinking list')
})

t.test('sampled: the chosen token is listed with its own logprob when among the top 20', async t => {
  const res = await post({ temperature: 0.9, seed: 5, max_tokens: 40, logprobs: true, top_logprobs: 20 })
  const entries = res.json().choices[0].logprobs.content as Entry[]
  checkEntries(t, entries, { top: 20, greedy: false })
  const listed = entries.filter(e => e.top_logprobs.some(alt => alt.token === e.token)).length
  t.ok(listed > entries.length / 2, `${listed} of ${entries.length} chosen tokens are among the top 20`)
  // At temperature 0.9 the distribution is the logits / 0.9: sharper than at 1.
  const cool = await post({ temperature: 0, max_tokens: 1, logprobs: true, top_logprobs: 1 })
  const hot = await post({ temperature: 0.5, seed: 1, max_tokens: 1, logprobs: true, top_logprobs: 1 })
  const raw = cool.json().choices[0].logprobs.content[0].top_logprobs[0]
  const sharp = hot.json().choices[0].logprobs.content[0].top_logprobs[0]
  t.equal(sharp.token, raw.token, 'the same most likely first token')
  t.ok(sharp.logprob > raw.logprob, `temperature 0.5 sharpens it (${sharp.logprob} > ${raw.logprob}); temperature 0 reports the raw logits`)
})

t.test('logprobs without top_logprobs: each token, no alternatives', async t => {
  const res = await post({ temperature: 0, max_tokens: 10, logprobs: true })
  const entries = res.json().choices[0].logprobs.content as Entry[]
  t.equal(entries.length, 10)
  for (const entry of entries) t.same(entry.top_logprobs, [])
  const none = await post({ temperature: 0, max_tokens: 10 })
  t.notOk('logprobs' in none.json().choices[0], 'not asked, not sent')
})

t.test('streamed at temperature 0: each chunk carries its own tokens, and they join into the whole reply\'s', async t => {
  const whole = await post({ temperature: 0, max_tokens: 60, logprobs: true, top_logprobs: 3 })
  const res = await post({ temperature: 0, max_tokens: 60, logprobs: true, top_logprobs: 3, stream: true })
  const chunks = res.body.split('\n\n').filter(f => f.startsWith('data: {')).map(f => JSON.parse(f.slice(6)))
  const joined: Entry[] = []
  for (const chunk of chunks) {
    const choice = chunk.choices[0]
    if (!choice || choice.delta.role || choice.finish_reason) continue
    const entries = choice.logprobs.content as Entry[]
    t.equal(text(entries.map(e => e.bytes ?? [])), choice.delta.content ?? '', 'a chunk\'s tokens spell its text')
    joined.push(...entries)
  }
  t.same(joined, whole.json().choices[0].logprobs.content, 'the streamed lists join into the non-streamed one')
})

t.test('a stop string\'s tokens are not reported: the tokens spell the reply', async t => {
  const res = await post({ temperature: 0, max_tokens: 60, logprobs: true, stop: ['.'] })
  const choice = res.json().choices[0]
  t.equal(choice.finish_reason, 'stop')
  t.equal(text((choice.logprobs.content as Entry[]).map(e => e.bytes ?? [])), choice.message.content)
})

t.test('with a JSON schema: only tokens the grammar allows are listed, and greedy still picks the top one', async t => {
  const schema = { type: 'object', properties: { name: { type: 'string', enum: ['Tom', 'Lily'] } }, required: ['name'], additionalProperties: false }
  const res = await post({ temperature: 0, max_tokens: 40, logprobs: true, top_logprobs: 5, response_format: { type: 'json_schema', json_schema: { name: 'n', schema, strict: true } } })
  const choice = res.json().choices[0]
  t.same(JSON.parse(choice.message.content).name !== undefined, true)
  const entries = choice.logprobs.content as Entry[]
  t.equal(entries[0].token, '{', 'the first token is the object\'s brace')
  t.ok(entries[0].top_logprobs.every(alt => alt.token.startsWith('{')), 'every listed alternative is one the grammar allows')
  t.ok(entries.some(e => e.top_logprobs.length < 5), 'where the grammar allows fewer than 5 tokens, fewer are listed')
  for (const entry of entries) {
    t.equal(entry.top_logprobs[0].token, entry.token)
    const mass = entry.top_logprobs.reduce((sum, alt) => sum + Math.exp(alt.logprob), 0)
    t.ok(mass <= 1 + 1e-9)
  }
})

t.test('the openai client reads logprobs, whole and streamed', async t => {
  const reply = await client.chat.completions.create({ model: MODEL, messages, temperature: 0, max_tokens: 12, logprobs: true, top_logprobs: 2 })
  const content = reply.choices[0].logprobs?.content ?? []
  t.equal(content.length, 12)
  t.equal(content[0].top_logprobs.length, 2)
  t.equal(content.map(c => c.token).join(''), reply.choices[0].message.content)

  const stream = await client.chat.completions.create({ model: MODEL, messages, temperature: 0, max_tokens: 12, logprobs: true, top_logprobs: 2, stream: true })
  const streamed = []
  for await (const chunk of stream) streamed.push(...(chunk.choices[0]?.logprobs?.content ?? []))
  t.same(streamed, content)
})

t.test('refusals name the field', async t => {
  const cases: Array<[Record<string, unknown>, string]> = [
    [{ top_logprobs: 3 }, 'top_logprobs'],
    [{ logprobs: false, top_logprobs: 3 }, 'top_logprobs'],
    [{ logprobs: true, top_logprobs: 21 }, 'top_logprobs'],
    [{ logprobs: true, top_logprobs: -1 }, 'top_logprobs'],
    [{ logprobs: true, top_logprobs: 1.5 }, 'top_logprobs'],
    [{ logprobs: 'yes' }, 'logprobs'],
  ]
  for (const [body, param] of cases) {
    const res = await post({ max_tokens: 2, ...body })
    t.equal(res.statusCode, 400, JSON.stringify(body))
    t.same(Object.keys(res.json().error).sort(), ['code', 'message', 'param', 'type'])
    t.equal(res.json().error.code, 'invalid_parameter')
    t.equal(res.json().error.param, param, JSON.stringify(body))
  }
  const nulls = await post({ max_tokens: 2, logprobs: null, top_logprobs: null })
  t.equal(nulls.statusCode, 200, 'null is absent')
  t.notOk('logprobs' in nulls.json().choices[0])
  const zero = await post({ max_tokens: 2, logprobs: true, top_logprobs: 0 })
  t.equal(zero.statusCode, 200)
  t.same(zero.json().choices[0].logprobs.content[0].top_logprobs, [])
})
