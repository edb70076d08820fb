// reasoning_effort is accepted with its five values (anything else is a 400), and every local
// reply reports usage.completion_tokens_details.reasoning_tokens, in the body and in the stream's
// usage chunk (stories260k does not think: 0, exactly).
import t from 'tap'
import OpenAI from 'openai'
import { startStoriesServer } from '../helpers/stories-server.ts'

const MODEL = 'stories260k'
const KEY = `sk-chatd-${'reasnEff'.repeat(4)}`
const server = await startStoriesServer(t, { modelId: MODEL, key: KEY })
const client = new OpenAI({ apiKey: KEY, baseURL: `${server.url}/api/v1`, maxRetries: 0 })
const messages = [{ role: 'user' as const, content: 'Once upon a time' }]

t.test('reasoning_tokens in the reply and in the final stream chunk', async t => {
  for (const effort of ['none', 'minimal', 'low', 'medium', 'high'] as const) {
    const whole = await client.chat.completions.create({ model: MODEL, messages, max_tokens: 5, temperature: 0, reasoning_effort: effort })
    t.same(whole.usage?.completion_tokens_details, { reasoning_tokens: 0 }, `${effort}: a model that does not think`)
  }
  const stream = await client.chat.completions.create({ model: MODEL, messages, max_tokens: 5, temperature: 0, stream: true, stream_options: { include_usage: true } })
  let usage: OpenAI.CompletionUsage | null | undefined
  for await (const chunk of stream) if (chunk.usage) usage = chunk.usage
  t.same(usage?.completion_tokens_details, { reasoning_tokens: 0 })
})

t.test('an effort outside the five is a 400 naming reasoning_effort', async t => {
  for (const effort of ['max', '', 3, 'HIGH']) {
    const res = await server.app.inject({ method: 'POST', url: '/api/v1/chat/completions', headers: { authorization: `Bearer ${KEY}` }, payload: { model: MODEL, messages, reasoning_effort: effort } })
    t.equal(res.statusCode, 400)
    t.match(res.json().error, { code: 'invalid_parameter', param: 'reasoning_effort' })
  }
})
