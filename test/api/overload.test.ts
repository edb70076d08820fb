// A full queue on the real engine: with QUEUE_SIZE requests in progress, the
// next ones are refused at once with 503 server_overloaded and Retry-After,
// and every admitted request still completes exactly as it would alone.
import type { AddressInfo } from 'node:net'
import { join } from 'node:path'
import t from 'tap'
import { createParser } from 'eventsource-parser'
import { loadConfig } from '../../src/config.ts'
import { startServer } from '../../src/server.ts'
import { storiesModelDir } from '../helpers/models.ts'

const KEY = `sk-chatd-${'overload'.repeat(4)}`
const dir = t.testdir({
  'models.json': JSON.stringify({ models: [{ id: 'stories', backend: 'onnx', path: storiesModelDir(), dtype: 'fp32', device: 'cpu' }] }),
})
const config = loadConfig({
  PORT: '0',
  LOG_LEVEL: 'silent',
  DATABASE_URL: `sqlite://${join(dir, 'chatd.db')}`,
  MODELS_FILE: join(dir, 'models.json'),
  CHATD_ADMIN_KEY: KEY,
  CHATD_AUTO_PULL: '0',
  QUEUE_SIZE: '2',
  MAX_BATCH: '1',
})
const app = await startServer(config, { print: () => {}, logger: false })
t.teardown(() => app.close())
while ((await app.inject({ url: '/readyz' })).statusCode !== 200) await new Promise(resolve => setTimeout(resolve, 20))
const { port } = app.server.address() as AddressInfo

const ask = (content: string, stream: boolean) => fetch(`http://127.0.0.1:${port}/api/v1/chat/completions`, {
  method: 'POST',
  headers: { authorization: `Bearer ${KEY}`, 'content-type': 'application/json' },
  body: JSON.stringify({ model: 'stories', messages: [{ role: 'user', content }], temperature: 0, max_tokens: 30, stream }),
})

t.test('beyond QUEUE_SIZE: 503 with Retry-After; admitted requests complete unchanged', async t => {
  const alone = await (await ask('Once upon a time', false)).json()
  const prompts = ['Once upon a time', 'Once upon a time', 'The dog', 'A cat', 'Tom']
  const responses = await Promise.all(prompts.map((p, i) => ask(p, i % 2 === 0)))
  const admitted = responses.filter(r => r.status === 200)
  const refused = responses.filter(r => r.status === 503)
  t.equal(admitted.length, 2, 'QUEUE_SIZE requests admitted')
  t.equal(refused.length, 3, 'the rest refused at once')
  for (const r of refused) {
    t.equal(r.headers.get('retry-after'), '1')
    t.match(await r.json(), { error: { code: 'server_overloaded', type: 'server_error' } })
  }
  // Both admitted requests asked for the same story; each must match the solo run.
  for (const r of admitted) {
    let text: string
    if (r.headers.get('content-type')?.startsWith('text/event-stream')) {
      const events: string[] = []
      const parser = createParser({ onEvent: e => { events.push(e.data) } })
      parser.feed(await r.text())
      t.equal(events.at(-1), '[DONE]', 'the stream finished')
      text = events.slice(0, -1).map(d => JSON.parse(d).choices[0]?.delta?.content ?? '').join('')
    } else {
      text = (await r.json()).choices[0].message.content
    }
    t.equal(text, alone.choices[0].message.content, 'no admitted request lost or changed')
  }
  // With the queue drained, the next request is served again.
  t.equal((await ask('The dog', false)).status, 200)
})
