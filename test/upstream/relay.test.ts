// End to end through a real upstream: a second chatd on loopback serves
// stories260k with the local ONNX engine, and the chatd under test serves it
// again as an `openai` backend model. With greedy decoding a call through the
// relay equals a direct call, streamed and not, usage included; sampling
// parameters pass through; a client leaving stops the upstream's generation.

import http from 'node:http'
import { once } from 'node:events'
import { writeFileSync } from 'node:fs'
import type { AddressInfo } from 'node:net'
import { join } from 'node:path'
import t from 'tap'
import OpenAI from 'openai'
import type { FastifyInstance } from 'fastify'
import { loadConfig } from '../../src/config.ts'
import { startServer } from '../../src/server.ts'
import { storiesModelEntry } from '../helpers/models.ts'

const KEY = `sk-chatd-${'relayTst'.repeat(4)}`
const UPSTREAM_KEY = `sk-chatd-${'upstream'.repeat(4)}`

// One directory for both servers (each t.testdir() call would empty it again).
const dir = t.testdir()

async function start (name: string, models: unknown[], adminKey: string): Promise<{ app: FastifyInstance; port: number; client: OpenAI }> {
  const file = join(dir, `${name}-models.json`)
  writeFileSync(file, JSON.stringify({ models }))
  const config = loadConfig({ PORT: '0', LOG_LEVEL: 'silent', DATABASE_URL: `sqlite://${join(dir, `${name}.db`)}`, MODELS_FILE: file, CHATD_ADMIN_KEY: adminKey })
  const app = await startServer(config, { print: () => {}, logger: false, env: {} })
  t.teardown(() => app.close())
  const deadline = Date.now() + 60000
  while ((await app.inject({ url: '/readyz' })).statusCode !== 200) {
    if (Date.now() > deadline) throw new Error(`${name}: models did not become ready`)
    await new Promise(resolve => setTimeout(resolve, 50))
  }
  const { port } = app.server.address() as AddressInfo
  return { app, port, client: new OpenAI({ apiKey: adminKey, baseURL: `http://127.0.0.1:${port}/api/v1`, maxRetries: 0 }) }
}

// Started one after the other: the relay needs the upstream's port.
const upstream = await start('upstream', [storiesModelEntry('stories260k')], UPSTREAM_KEY)
const relay = await start('relay', [
  { id: 'relay', backend: 'openai', baseUrl: `http://127.0.0.1:${upstream.port}/api/v1`, apiKey: UPSTREAM_KEY, upstreamModel: 'stories260k', passTopK: true, passCacheSalt: true },
], KEY)

const messages = [{ role: 'user' as const, content: 'Once upon a time, there was a dog' }]

async function metric (app: FastifyInstance, name: string, labels: string): Promise<number> {
  const text = (await app.inject({ url: '/metrics' })).body
  const line = text.split('\n').find(l => l.startsWith(`${name}{${labels}}`))
  return line === undefined ? 0 : Number(line.split(' ').at(-1))
}

t.test('non-streamed: through the relay equals a direct call (greedy), usage included', async t => {
  const direct = await upstream.client.chat.completions.create({ model: 'stories260k', messages, temperature: 0 })
  const relayed = await relay.client.chat.completions.create({ model: 'relay', messages, temperature: 0 })
  t.ok(direct.choices[0].message.content!.length > 20, 'a story came back')
  t.equal(relayed.choices[0].message.content, direct.choices[0].message.content)
  t.equal(relayed.choices[0].finish_reason, direct.choices[0].finish_reason)
  t.same(relayed.usage, direct.usage, 'usage is the upstream\'s own count')
  t.equal(relayed.model, 'relay', 'the model is the relay\'s name for it')
  t.not(relayed.id, direct.id, 'chatd\'s own id')
})

t.test('streamed: the same text and frame sequence as a direct stream', async t => {
  const collect = async (client: OpenAI, model: string) => {
    const stream = await client.chat.completions.create({ model, messages, temperature: 0, max_tokens: 40, stream: true, stream_options: { include_usage: true } })
    const chunks = []
    for await (const chunk of stream) chunks.push(chunk)
    return chunks
  }
  const direct = await collect(upstream.client, 'stories260k')
  const relayed = await collect(relay.client, 'relay')
  const text = (chunks: typeof direct) => chunks.map(c => c.choices[0]?.delta.content ?? '').join('')
  t.equal(text(relayed), text(direct))
  t.same(relayed[0].choices[0].delta, { role: 'assistant', content: '' }, 'role chunk first')
  t.same(relayed.at(-2)!.choices[0], { index: 0, delta: {}, finish_reason: 'length' }, 'then the finish chunk')
  t.same(relayed.at(-1)!.choices, [], 'then the usage chunk')
  t.same(relayed.at(-1)!.usage, direct.at(-1)!.usage)
  t.ok(relayed.length > 10, `streamed in pieces (${relayed.length} chunks)`)
  for (const c of relayed) t.equal(c.id, relayed[0].id)
  t.not(relayed[0].id, direct[0].id)
})

t.test('sampling parameters pass through: seed, top_p, top_k and stop give the upstream\'s own result', async t => {
  const params = { messages, temperature: 1, top_p: 0.9, top_k: 40, seed: 11, max_tokens: 40 }
  const direct = await upstream.client.chat.completions.create({ model: 'stories260k', ...params } as OpenAI.ChatCompletionCreateParamsNonStreaming)
  const relayed = await relay.client.chat.completions.create({ model: 'relay', ...params } as OpenAI.ChatCompletionCreateParamsNonStreaming)
  t.equal(relayed.choices[0].message.content, direct.choices[0].message.content)

  const stopped = await relay.client.chat.completions.create({ model: 'relay', messages, temperature: 0, stop: ['.'] })
  const whole = await upstream.client.chat.completions.create({ model: 'stories260k', messages, temperature: 0, max_tokens: 60 })
  t.equal(stopped.choices[0].message.content, whole.choices[0].message.content!.split('.')[0])
})

t.test('request controls reach the upstream as an instruction', async t => {
  // stories260k's template joins every message's text, so the instruction shows in the prompt token count.
  const plain = await relay.client.chat.completions.create({ model: 'relay', messages, temperature: 0, max_tokens: 5 })
  const controlled = await relay.client.chat.completions.create({ model: 'relay', messages, temperature: 0, max_tokens: 5, tone: 'Casual' } as OpenAI.ChatCompletionCreateParamsNonStreaming)
  t.ok(controlled.usage!.prompt_tokens > plain.usage!.prompt_tokens, 'the prompt grew by the instruction')
})

t.test('a client that disconnects from the relay stops the upstream\'s generation', async t => {
  const cancelledBefore = await metric(upstream.app, 'chatd_completions_total', 'model="stories260k",finish_reason="cancelled"')
  const req = http.request({
    port: relay.port,
    host: '127.0.0.1',
    method: 'POST',
    path: '/api/v1/chat/completions',
    headers: { authorization: `Bearer ${KEY}`, 'content-type': 'application/json' },
  })
  req.on('error', () => {})
  req.end(JSON.stringify({ model: 'relay', messages, temperature: 0, stream: true }))
  const [res] = await once(req, 'response') as [http.IncomingMessage]
  let got = ''
  for await (const chunk of res) {
    got += chunk
    if (got.split('"content":"').length > 3) break
  }
  req.destroy()
  const deadline = Date.now() + 10000
  while (await metric(upstream.app, 'chatd_completions_total', 'model="stories260k",finish_reason="cancelled"') === cancelledBefore && Date.now() < deadline) {
    await new Promise(resolve => setTimeout(resolve, 20))
  }
  t.equal(await metric(upstream.app, 'chatd_completions_total', 'model="stories260k",finish_reason="cancelled"'), cancelledBefore + 1, 'the upstream cancelled its generation')
  t.equal(await metric(upstream.app, 'chatd_active_requests', 'model="stories260k"'), 0)
  t.equal(await metric(relay.app, 'chatd_active_requests', 'model="relay"'), 0)
})

t.test('an upstream error is the relay\'s clean error', async t => {
  // The upstream refuses a prompt longer than its context; the relay passes that on as 400.
  const long = [{ role: 'user' as const, content: 'word '.repeat(2000) }]
  await t.rejects(relay.client.chat.completions.create({ model: 'relay', messages: long, max_tokens: 10 }), { status: 400, code: 'context_length_exceeded' })
  const res = await relay.app.inject({
    method: 'POST',
    url: '/api/v1/chat/completions',
    headers: { authorization: `Bearer ${KEY}` },
    payload: { model: 'relay', messages: long, max_tokens: 10 },
  })
  t.notMatch(res.body, String(upstream.port))
  t.notMatch(res.body, UPSTREAM_KEY)
})

t.test('logprobs, top_logprobs and response_format pass through; the upstream\'s logprobs come back', async t => {
  const params = { messages, temperature: 0, max_tokens: 20, logprobs: true, top_logprobs: 3 }
  const direct = await upstream.client.chat.completions.create({ model: 'stories260k', ...params })
  const relayed = await relay.client.chat.completions.create({ model: 'relay', ...params })
  t.equal(relayed.choices[0].logprobs?.content?.length, 20)
  t.same(relayed.choices[0].logprobs, direct.choices[0].logprobs, 'the upstream\'s own values, token by token')

  const stream = await relay.client.chat.completions.create({ model: 'relay', ...params, stream: true })
  const streamed = []
  for await (const chunk of stream) streamed.push(...(chunk.choices[0]?.logprobs?.content ?? []))
  t.same(streamed, direct.choices[0].logprobs?.content, 'streamed through the relay too')

  const schema = { type: 'object', properties: { animal: { type: 'string', enum: ['cat', 'dog'] } }, required: ['animal'], additionalProperties: false }
  const format = { type: 'json_schema' as const, json_schema: { name: 'pet', schema, strict: true } }
  const constrained = await relay.client.chat.completions.create({ model: 'relay', messages, temperature: 0, max_tokens: 40, response_format: format })
  const constrainedDirect = await upstream.client.chat.completions.create({ model: 'stories260k', messages, temperature: 0, max_tokens: 40, response_format: format })
  t.equal(constrained.choices[0].message.content, constrainedDirect.choices[0].message.content, 'the upstream constrained it')
  t.ok(['cat', 'dog'].includes(JSON.parse(constrained.choices[0].message.content ?? '').animal))

  const bad = await relay.client.chat.completions.create({ model: 'relay', messages, max_tokens: 5, response_format: { type: 'json_schema', json_schema: { name: 'bad', schema: { type: 'bogus' } } } })
    .then(() => null, (err: { status: number; code: string; param: string }) => err)
  t.match(bad, { status: 400, code: 'invalid_parameter', param: 'response_format' }, 'the upstream\'s refusal of a schema it cannot use is the client\'s 400')
})
