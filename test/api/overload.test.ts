// A full queue on the real engine: with QUEUE_SIZE requests in progress, the
// next ones are refused at once with 503 server_overloaded and Retry-After,
// and every admitted request still completes exactly as it would alone.
import t from 'tap'
import { createParser } from 'eventsource-parser'
import { startStoriesServer } from '../helpers/stories-server.ts'

const KEY = `sk-chatd-${'overload'.repeat(4)}`
const { url } = await startStoriesServer(t, {
  modelId: 'stories',
  key: KEY,
  // Streams commit their 200 as soon as they are admitted, with keep-alive comments while they wait.
  env: { SSE_KEEPALIVE_MS: '20', QUEUE_SIZE: '2', MAX_BATCH: '1' },
})

const ask = (content: string, stream: boolean, maxTokens = 300) => fetch(`${url}/api/v1/chat/completions`, {
  method: 'POST',
  headers: { authorization: `Bearer ${KEY}`, 'content-type': 'application/json' },
  body: JSON.stringify({ model: 'stories', messages: [{ role: 'user', content }], temperature: 0, max_tokens: maxTokens, stream }),
})

async function streamedText (r: Response): Promise<{ text: string; done: boolean }> {
  const events: string[] = []
  const parser = createParser({ onEvent: e => { events.push(e.data) } })
  parser.feed(await r.text())
  const text = events.filter(d => d !== '[DONE]').map(d => JSON.parse(d).choices[0]?.delta?.content ?? '').join('')
  return { text, done: events.at(-1) === '[DONE]' }
}

t.test('beyond QUEUE_SIZE: 503 with Retry-After; admitted requests complete unchanged', async t => {
  const prompts = ['Once upon a time', 'The dog', 'A cat', 'Tom', 'Lily']
  const alone: Array<{ text: string; done: boolean }> = []
  for (const p of prompts.slice(0, 2)) alone.push(await streamedText(await ask(p, true)))
  // All five at once: the first two take both places (one decoding, one
  // waiting for MAX_BATCH=1) for a few hundred tokens, far longer than the
  // others take to arrive, so those are refused at once.
  const responses = await Promise.all(prompts.map((p, i) => ask(p, i !== 3)))
  const statuses = responses.map(r => r.status)
  t.same(statuses.slice(0, 2), [200, 200], 'QUEUE_SIZE requests admitted')
  for (const r of responses.slice(2)) {
    t.equal(r.status, 503, 'refused')
    t.equal(r.headers.get('retry-after'), '1')
    t.match(await r.json(), { error: { code: 'server_overloaded', type: 'server_error' } })
  }
  const texts = await Promise.all(responses.slice(0, 2).map(streamedText))
  texts.forEach((got, i) => {
    t.ok(got.done, 'the stream finished')
    t.equal(got.text, alone[i].text, 'no admitted request lost or changed')
  })
  // With the queue drained, the next request is served again.
  t.equal((await ask('The dog', false, 5)).status, 200)
})
