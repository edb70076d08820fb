// Shutdown on the real model with the official openai client and its default
// keep-alive agent (no custom dispatcher): after a client abandons a stream,
// close() must not wait on the connections that client keeps open.

import type { Socket } from 'node:net'
import t from 'tap'
import OpenAI from 'openai'
import { startStoriesServer } from '../helpers/stories-server.ts'

const MODEL = 'stories260k'
const KEY = `sk-chatd-${'shutDown'.repeat(4)}`
const messages = [{ role: 'user' as const, content: 'Once upon a time, there was a dog' }]

t.test('close() is prompt after a client with keep-alive connections abandoned a stream', async t => {
  const { app, url } = await startStoriesServer(t, { modelId: MODEL, key: KEY, closeOnTeardown: false })
  const sockets = new Set<Socket>()
  app.server.on('connection', (socket: Socket) => { sockets.add(socket); socket.once('close', () => sockets.delete(socket)) })
  const client = new OpenAI({ apiKey: KEY, baseURL: `${url}/api/v1`, maxRetries: 0 })

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
