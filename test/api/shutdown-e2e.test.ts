// Shutdown on the real model with the official openai client and its default
// keep-alive agent (no custom dispatcher): after a client abandons a stream,
// close() must not wait on the connections that client keeps open.

import type { AddressInfo } from 'node:net'
import type { Socket } from 'node:net'
import { join } from 'node:path'
import t from 'tap'
import OpenAI from 'openai'
import { loadConfig } from '../../src/config.ts'
import { startServer } from '../../src/server.ts'
import { storiesModelDir } from '../helpers/models.ts'

const MODEL = 'stories260k'
const KEY = `sk-chatd-${'shutDown'.repeat(4)}`
const messages = [{ role: 'user' as const, content: 'Once upon a time, there was a dog' }]

t.test('close() is prompt after a client with keep-alive connections abandoned a stream', async t => {
  const dir = t.testdir({ 'models.json': JSON.stringify({ models: [{ id: MODEL, backend: 'onnx', path: storiesModelDir(), dtype: 'fp32', device: 'cpu' }] }) })
  const app = await startServer(loadConfig({
    PORT: '0',
    LOG_LEVEL: 'silent',
    DATABASE_URL: `sqlite://${join(dir, 'chatd.db')}`,
    MODELS_FILE: join(dir, 'models.json'),
    CHATD_ADMIN_KEY: KEY,
  }), { print: () => {}, logger: false })
  const sockets = new Set<Socket>()
  app.server.on('connection', (socket: Socket) => { sockets.add(socket); socket.once('close', () => sockets.delete(socket)) })
  const deadline = Date.now() + 60_000
  while ((await app.inject({ url: '/readyz' })).statusCode !== 200) {
    if (Date.now() > deadline) throw new Error('the model did not become ready')
    await new Promise(resolve => setTimeout(resolve, 50))
  }
  const client = new OpenAI({ apiKey: KEY, baseURL: `http://127.0.0.1:${(app.server.address() as AddressInfo).port}/api/v1`, maxRetries: 0 })

  // A few whole replies at once leave several pooled keep-alive connections open.
  const replies = await Promise.all([1, 2, 3].map(() => client.chat.completions.create({ model: MODEL, messages, max_tokens: 5 })))
  t.equal(replies.length, 3)
  const stream = await client.chat.completions.create({ model: MODEL, messages, temperature: 0, stream: true })
  let pieces = 0
  for await (const chunk of stream) {
    if (chunk.choices[0]?.delta.content) pieces++
    if (pieces >= 3) break // leaving the loop aborts the request
  }
  t.equal(pieces, 3, 'the stream was abandoned part-way')
  await new Promise(resolve => setTimeout(resolve, 200)) // let the client settle its connections
  t.ok(sockets.size > 0, `the client still holds connections (${sockets.size})`)

  const started = performance.now()
  let timer: NodeJS.Timeout | undefined
  const outcome = await Promise.race([
    app.close().then(() => 'closed' as const),
    new Promise<'hung'>(resolve => { timer = setTimeout(resolve, 5000, 'hung') }),
  ]).finally(() => clearTimeout(timer))
  const tookMs = Math.round(performance.now() - started)
  if (outcome === 'hung') {
    for (const socket of sockets) socket.destroy() // let the hung close() finish so the test ends
    await app.close()
  }
  t.equal(outcome, 'closed', `close() returned within 5 s (took ${tookMs} ms)`)
  t.ok(tookMs < 2000, `close() was prompt (${tookMs} ms)`)
  t.equal(sockets.size, 0, 'no connection left open')
})
