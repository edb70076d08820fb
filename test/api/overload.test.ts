// A full queue on the real engine: with QUEUE_SIZE requests in progress, the
// next ones are refused at once with 503 server_overloaded and Retry-After,
// and the admitted requests go on exactly as they would alone. The model
// cannot end a reply on its own (no end-of-sequence token), so the admitted
// requests are in progress for as long as the test keeps them, however slow
// the machine: nothing here depends on how long anything takes.
import http from 'node:http'
import { once } from 'node:events'
import t from 'tap'
import { createParser } from 'eventsource-parser'
import { endlessModelDir } from '../helpers/models.ts'
import { startStoriesServer } from '../helpers/stories-server.ts'

const KEY = `sk-chatd-${'overload'.repeat(4)}`
const MODEL = 'endless'
const { url, app } = await startStoriesServer(t, {
  modelId: MODEL,
  key: KEY,
  modelDir: endlessModelDir(),
  // Streams commit their 200 as soon as they are admitted, with keep-alive comments while they wait.
  env: { SSE_KEEPALIVE_MS: '20', QUEUE_SIZE: '2', MAX_BATCH: '1' },
})

const body = (content: string, stream: boolean, maxTokens: number) =>
  JSON.stringify({ model: MODEL, messages: [{ role: 'user', content }], temperature: 0, max_tokens: maxTokens, stream })

const ask = (content: string, stream: boolean, maxTokens = 40) => fetch(`${url}/api/v1/chat/completions`, {
  method: 'POST',
  headers: { authorization: `Bearer ${KEY}`, 'content-type': 'application/json' },
  body: body(content, stream, maxTokens),
})

/** A streamed request the test reads as it likes and may drop: its text so far, and whether it finished. */
async function openStream (content: string, maxTokens: number) {
  const req = http.request(`${url}/api/v1/chat/completions`, { method: 'POST', headers: { authorization: `Bearer ${KEY}`, 'content-type': 'application/json' } })
  req.on('error', () => {})
  req.end(body(content, true, maxTokens))
  const [res] = await once(req, 'response') as [http.IncomingMessage]
  const state = { status: res.statusCode, text: '', done: false }
  const parser = createParser({
    onEvent: e => {
      if (e.data === '[DONE]') state.done = true
      else state.text += JSON.parse(e.data).choices[0]?.delta?.content ?? ''
    },
  })
  const chunks = res[Symbol.asyncIterator]()
  return {
    state,
    /** Reads until `enough` holds or the stream ends. */
    async readUntil (enough: () => boolean): Promise<void> {
      while (!enough()) {
        const next = await chunks.next()
        if (next.done) return
        parser.feed(String(next.value))
      }
    },
    drop: () => req.destroy(),
  }
}

async function metric (name: string, labels: string): Promise<number> {
  const text = (await app.inject({ url: '/metrics' })).body
  const line = text.split('\n').find(l => l.startsWith(`${name}{${labels}}`))
  return line === undefined ? 0 : Number(line.split(' ').at(-1))
}

async function streamedText (r: Response): Promise<{ text: string; done: boolean }> {
  const events: string[] = []
  const parser = createParser({ onEvent: e => { events.push(e.data) } })
  parser.feed(await r.text())
  const text = events.filter(d => d !== '[DONE]').map(d => JSON.parse(d).choices[0]?.delta?.content ?? '').join('')
  return { text, done: events.at(-1) === '[DONE]' }
}

t.test('beyond QUEUE_SIZE: 503 with Retry-After; admitted requests go on unchanged', async t => {
  const [first, second, ...others] = ['Once upon a time', 'The dog', 'A cat', 'Tom', 'Lily']
  const alone = { first: await streamedText(await ask(first, true)), second: await streamedText(await ask(second, true)) }
  t.ok(alone.first.done && alone.first.text.length > 0 && alone.second.done, 'each alone: a reply of 40 tokens')
  const cancelled = await metric('chatd_completions_total', `model="${MODEL}",finish_reason="cancelled"`)

  // The queue's two places: the first decodes (30000 tokens, so it ends only when the test drops
  // it), the second waits for the one decoding row (MAX_BATCH=1). Each is sent once the one before
  // it was admitted.
  const running = await openStream(first, 30_000)
  t.equal(running.state.status, 200, 'the first is admitted')
  const waiting = await openStream(second, 40)
  t.equal(waiting.state.status, 200, 'the second is admitted')

  // Three more at once, in whatever order they arrive: every one is refused.
  const refused = await Promise.all(others.map((p, i) => ask(p, i !== 1)))
  for (const r of refused) {
    t.equal(r.status, 503, 'refused')
    t.equal(r.headers.get('retry-after'), '1')
    t.match(await r.json(), { error: { code: 'server_overloaded', type: 'server_error' } })
  }

  // The first went on as it would alone; it is dropped, and the second runs to its end.
  await running.readUntil(() => running.state.text.length >= alone.first.text.length)
  t.ok(running.state.text.startsWith(alone.first.text), 'the running request: its reply so far is the one it gets alone')
  t.notOk(running.state.done, 'and it was still going')
  running.drop()
  await waiting.readUntil(() => false)
  t.same(waiting.state, { status: 200, text: alone.second.text, done: true }, 'the waiting request: the reply it gets alone, to the end')
  const cancelledNow = () => metric('chatd_completions_total', `model="${MODEL}",finish_reason="cancelled"`)
  const deadline = Date.now() + 60_000
  while (await cancelledNow() === cancelled && Date.now() < deadline) await new Promise(resolve => setTimeout(resolve, 20))
  t.equal(await cancelledNow(), cancelled + 1, 'the first ended by the client going away, after the refusals: it was in progress throughout')
  // With the queue drained, the next request is served again.
  t.equal((await ask('The dog', false, 5)).status, 200)
})
