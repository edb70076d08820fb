// End to end: `chatd serve` as the server module starts it, the real ONNX
// engine on the real stories260k model (converted by chatd's own converter),
// and the official `openai` client over loopback HTTP. A second model, a tiny
// random Llama without an end-of-sequence token, gives replies that cannot end
// on their own, for the disconnect test.

import http from 'node:http'
import { once } from 'node:events'
import type { AddressInfo } from 'node:net'
import { join } from 'node:path'
import t from 'tap'
import OpenAI from 'openai'
import type { FastifyInstance } from 'fastify'
import { loadConfig, type Config } from '../../src/config.ts'
import { loadChatTemplate } from '../../src/engine/onnx/text/chat-template.ts'
import { loadTokenizer } from '../../src/engine/onnx/text/tokenizer.ts'
import { run } from '../../src/cli.ts'
import { startServer } from '../../src/server.ts'
import { endlessModelDir, storiesModelDir } from '../helpers/models.ts'
import { testDevice } from '../helpers/webgpu.ts'

const MODEL = 'stories260k'
const ENDLESS = 'endless'
const KEY = `sk-chatd-${'e2eTest'.repeat(4)}abcd`

const modelDir = await storiesModelDir()
const tokenizer = await loadTokenizer(modelDir)
const template = await loadChatTemplate(modelDir)

/** What the tokenizer says a reply costs: prompt tokens of the rendered conversation, completion tokens of the reply in its context. */
function tokenizerUsage (messages: Array<{ role: 'system' | 'user' | 'assistant'; content: string }>, reply: string) {
  const prompt = template.render(messages).text
  const promptTokens = tokenizer.encode(prompt, { addSpecialTokens: false }).length
  const completionTokens = tokenizer.encode(prompt + reply, { addSpecialTokens: false }).length - promptTokens
  return { prompt_tokens: promptTokens, completion_tokens: completionTokens, total_tokens: promptTokens + completionTokens, prompt_tokens_details: { cached_tokens: 0 }, completion_tokens_details: { reasoning_tokens: 0 } }
}

const dir = t.testdir({
  'models.json': JSON.stringify({
    models: [
      { id: MODEL, backend: 'onnx', path: modelDir, dtype: 'fp32', device: testDevice() },
      { id: ENDLESS, backend: 'onnx', path: endlessModelDir(), dtype: 'fp32', device: testDevice() },
    ],
  }),
})
const config: Config = loadConfig({
  PORT: '0',
  LOG_LEVEL: 'silent',
  DATABASE_URL: `sqlite://${join(dir, 'chatd.db')}`,
  MODELS_FILE: join(dir, 'models.json'),
  CHATD_ADMIN_KEY: KEY,
})

const clientOf = (port: number, apiKey: string) => new OpenAI({ apiKey, baseURL: `http://127.0.0.1:${port}/api/v1`, maxRetries: 0 })

async function start (): Promise<{ app: FastifyInstance; client: OpenAI; port: number }> {
  const app = await startServer(config, { print: () => {}, logger: false })
  const { port } = app.server.address() as AddressInfo
  // Models load in the background; wait for readiness as a load balancer would.
  const deadline = Date.now() + 60000
  while ((await app.inject({ url: '/readyz' })).statusCode !== 200) {
    if (Date.now() > deadline) throw new Error('the model did not become ready')
    await new Promise(resolve => setTimeout(resolve, 50))
  }
  return { app, port, client: clientOf(port, KEY) }
}

let server = await start()
t.teardown(() => server.app.close())

async function metric (name: string, labels: string): Promise<number> {
  const text = (await server.app.inject({ url: '/metrics' })).body
  const line = text.split('\n').find(l => l.startsWith(`${name}{${labels}}`))
  return line === undefined ? 0 : Number(line.split(' ').at(-1))
}

const messages = [{ role: 'user' as const, content: 'Once upon a time, there was a dog' }]
/** A seed whose temperature-1 reply to `messages` leaves the greedy one within its first sentence. */
const SAMPLING_SEED = 3

t.test('non-streamed reply', async t => {
  const completion = await server.client.chat.completions.create({ model: MODEL, messages, temperature: 0 })
  t.match(completion.id, /^chatcmpl-/)
  t.equal(completion.object, 'chat.completion')
  t.equal(completion.model, MODEL)
  t.match(completion.system_fingerprint, /^fp_/)
  t.equal(completion.choices.length, 1)
  const [choice] = completion.choices
  t.equal(choice.index, 0)
  t.equal(choice.message.role, 'assistant')
  t.ok(choice.message.content!.length > 20, 'a story came back')
  t.equal(choice.finish_reason, 'stop', 'the model ended the story itself')
  t.same(completion.usage, tokenizerUsage(messages, choice.message.content!), 'usage equals the tokenizer\'s counts')
})

t.test('streamed reply equals the non-streamed one at temperature 0; include_usage', async t => {
  const whole = await server.client.chat.completions.create({ model: MODEL, messages, temperature: 0 })
  const stream = await server.client.chat.completions.create({ model: MODEL, messages, temperature: 0, stream: true, stream_options: { include_usage: true } })
  const chunks = []
  for await (const chunk of stream) chunks.push(chunk)

  t.same(chunks[0].choices[0].delta, { role: 'assistant', content: '' }, 'first the role chunk')
  const usageChunk = chunks.at(-1)!
  t.same(usageChunk.choices, [], 'last the usage chunk, with no choices')
  const finishChunk = chunks.at(-2)!
  t.same(finishChunk.choices[0].delta, {})
  t.equal(finishChunk.choices[0].finish_reason, 'stop')
  const text = chunks.map(c => c.choices[0]?.delta.content ?? '').join('')
  t.ok(chunks.length > 10, `streamed in pieces (${chunks.length} chunks)`)
  t.equal(text, whole.choices[0].message.content, 'same text')
  t.same(usageChunk.usage, whole.usage, 'same usage')
  t.same(usageChunk.usage, tokenizerUsage(messages, text))
  for (const c of chunks) t.equal(c.id, chunks[0].id)
})

t.test('max_tokens gives finish_reason length, in both modes', async t => {
  const whole = await server.client.chat.completions.create({ model: MODEL, messages, temperature: 0, max_tokens: 7 })
  t.equal(whole.choices[0].finish_reason, 'length')
  t.equal(whole.usage!.completion_tokens, 7)
  t.same(whole.usage, tokenizerUsage(messages, whole.choices[0].message.content!))

  const stream = await server.client.chat.completions.create({ model: MODEL, messages, temperature: 0, max_completion_tokens: 7, stream: true })
  let text = ''
  const finishes = []
  for await (const chunk of stream) {
    text += chunk.choices[0]?.delta.content ?? ''
    if (chunk.choices[0]?.finish_reason) finishes.push(chunk.choices[0].finish_reason)
  }
  t.same(finishes, ['length'])
  t.equal(text, whole.choices[0].message.content)
})

t.test('a seed reproduces; stop strings end the reply', async t => {
  // top_k and the spec's controls are not in the client's types; clients send them as extra body fields.
  const params = (seed: number) => ({ model: MODEL, messages, temperature: 1, top_p: 0.9, top_k: 40, seed, max_tokens: 40, language: 'English', tone: 'Default', wordcount: 'Default' as const })
  const ask = (seed: number) => server.client.chat.completions.create(params(seed) as OpenAI.ChatCompletionCreateParamsNonStreaming)
  const [a, b] = [await ask(11), await ask(11)]
  t.equal(a.choices[0].message.content, b.choices[0].message.content, 'same seed, same text')

  const greedy = (await server.client.chat.completions.create({ model: MODEL, messages, temperature: 0, max_tokens: 60 })).choices[0].message.content!
  const cut = greedy.indexOf('.')
  t.ok(cut > 0, 'the greedy reply has a sentence')
  const stopped = await server.client.chat.completions.create({ model: MODEL, messages, temperature: 0, stop: ['.'] })
  t.equal(stopped.choices[0].message.content, greedy.slice(0, cut), 'ends before the stop string')
  t.equal(stopped.choices[0].finish_reason, 'stop')
})

t.test('top_k and top_p reach the sampler: at temperature 1, top_k 1 and a tiny top_p give the greedy reply, the same seed without them another', async t => {
  const reply = async (body: Record<string, unknown>) => {
    const completion = await server.client.chat.completions.create({ model: MODEL, messages, max_tokens: 40, ...body } as OpenAI.ChatCompletionCreateParamsNonStreaming)
    // A prompt this short is below the prefix cache's minimum: every reply computed its whole prompt.
    t.equal(completion.usage?.prompt_tokens_details?.cached_tokens, 0)
    return completion.choices[0].message.content
  }
  const greedy = await reply({ temperature: 0 })
  const sampled = await reply({ temperature: 1, seed: SAMPLING_SEED })
  t.not(sampled, greedy, 'temperature 1 with this seed samples another reply')
  t.equal(await reply({ temperature: 1, seed: SAMPLING_SEED }), sampled, 'and the same one again')
  t.equal(await reply({ temperature: 1, seed: SAMPLING_SEED, top_k: 1 }), greedy, 'top_k 1: only the likeliest token is left')
  t.equal(await reply({ temperature: 1, seed: SAMPLING_SEED, top_p: 1e-6 }), greedy, 'top_p 1e-6: the nucleus is the likeliest token alone')
})

t.test('a seeded request computes its whole prompt, however much of it is cached; its unseeded twin reuses the cache', async t => {
  // Longer than the prefix cache's minimum of 16 tokens, and unlike any other prompt of this file.
  const long = [{ role: 'user' as const, content: 'Lily and Tom went to the park to play with a big red ball and a small blue kite.' }]
  const ask = (body: Record<string, unknown>) => server.client.chat.completions.create({ model: MODEL, messages: long, temperature: 1, max_tokens: 30, ...body } as OpenAI.ChatCompletionCreateParamsNonStreaming)
  const cold = await ask({ seed: 5 })
  t.ok(cold.usage!.prompt_tokens > 17, `a prompt of ${cold.usage!.prompt_tokens} tokens`)
  t.equal(cold.usage!.prompt_tokens_details?.cached_tokens, 0, 'the first time: nothing cached')
  const reused = (await ask({})).usage!.prompt_tokens_details?.cached_tokens ?? 0
  t.ok(reused >= 16, `the same request without a seed reused ${reused} tokens the seeded one left`)
  const again = await ask({ seed: 5 })
  t.equal(again.usage!.prompt_tokens_details?.cached_tokens, 0, 'seeded again: the whole prompt computed, although it is cached')
  t.equal(again.choices[0].message.content, cold.choices[0].message.content, 'the same reply as on the cold engine')
})

t.test('a client that disconnects mid-stream stops generation', async t => {
  const labels = (reason: string) => `model="${ENDLESS}",finish_reason="${reason}"`
  const cancelledBefore = await metric('chatd_completions_total', labels('cancelled'))
  const lengthBefore = await metric('chatd_completions_total', labels('length'))
  const tokensBefore = await metric('chatd_generated_tokens_total', `model="${ENDLESS}"`)
  const req = http.request({
    port: server.port,
    host: '127.0.0.1',
    method: 'POST',
    path: '/api/v1/chat/completions',
    headers: { authorization: `Bearer ${KEY}`, 'content-type': 'application/json' },
  })
  req.on('error', () => {})
  // The endless model has no end-of-sequence token: this reply can end only at max_tokens (seconds
  // of decoding away) or by the client going away.
  const maxTokens = 30_000
  req.end(JSON.stringify({ model: ENDLESS, messages, temperature: 0, max_tokens: maxTokens, stream: true }))
  const [res] = await once(req, 'response') as [http.IncomingMessage]
  let got = ''
  for await (const chunk of res) {
    got += chunk
    if (/"content":"[^"]/.test(got)) break // the reply has begun
  }
  req.destroy()

  // The server's own account of how the request ended: cancelled, not run to its length.
  const deadline = Date.now() + 60_000
  while (await metric('chatd_completions_total', labels('cancelled')) === cancelledBefore && Date.now() < deadline) {
    await new Promise(resolve => setTimeout(resolve, 20))
  }
  t.equal(await metric('chatd_completions_total', labels('cancelled')), cancelledBefore + 1, 'the engine reported the cancellation')
  t.equal(await metric('chatd_completions_total', labels('length')), lengthBefore, 'the reply did not run to max_tokens')
  t.equal(await metric('chatd_active_requests', `model="${ENDLESS}"`), 0, 'metrics show no request still active')
  const generated = await metric('chatd_generated_tokens_total', `model="${ENDLESS}"`) - tokensBefore
  t.ok(generated > 0 && generated < maxTokens, `generation stopped after ${generated} of ${maxTokens} tokens`)
})

t.test('concurrent requests are all answered, each with its own text', async t => {
  const prompts = ['Lily', 'The cat sat', 'Tom had a ball', 'One day']
  const replies = await Promise.all(prompts.map(content =>
    server.client.chat.completions.create({ model: MODEL, messages: [{ role: 'user', content }], temperature: 0, max_tokens: 30 })))
  for (const [i, reply] of replies.entries()) {
    const alone = await server.client.chat.completions.create({ model: MODEL, messages: [{ role: 'user', content: prompts[i] }], temperature: 0, max_tokens: 30 })
    t.equal(reply.choices[0].message.content, alone.choices[0].message.content, `"${prompts[i]}" is the same batched or alone`)
  }
  t.equal(await metric('chatd_active_requests', `model="${MODEL}"`), 0)
})

t.test('the model list shows the model ready', async t => {
  const list = await server.client.models.list()
  t.same(list.data.map(m => [m.id, m.object, m.owned_by, (m as unknown as { status: string }).status]), [[MODEL, 'model', 'chatd', 'ready'], [ENDLESS, 'model', 'chatd', 'ready']])
  const one = await server.client.models.retrieve(MODEL)
  t.equal(one.id, MODEL)
})

t.test('a restart keeps accounts and keys (SQLite file)', async t => {
  // An account and key made while the server runs, with the CLI as an operator makes them. Start-up
  // recreates only CHATD_ADMIN_KEY's account on an empty database, so this key works after the
  // restart only if the database kept it.
  const saved = process.env.DATABASE_URL
  process.env.DATABASE_URL = config.database.kind === 'sqlite' ? `sqlite://${config.database.path}` : ''
  const printed: string[] = []
  try {
    t.equal(await run(['accounts', 'create', '--email', 'reader@example.com'], line => { printed.push(line) }), 0)
    t.equal(await run(['keys', 'create', '--email', 'reader@example.com', '--name', 'e2e'], line => { printed.push(line) }), 0)
  } finally {
    if (saved === undefined) delete process.env.DATABASE_URL
    else process.env.DATABASE_URL = saved
  }
  const key = printed.at(-1)!
  t.match(key, /^sk-chatd-/)
  t.not(key, KEY)
  const ask = () => clientOf(server.port, key).chat.completions.create({ model: MODEL, messages, max_tokens: 3 })
  t.equal((await ask()).usage?.completion_tokens, 3, 'the new key works')
  await server.app.close()
  server = await start()
  t.equal((await ask()).usage?.completion_tokens, 3, 'the same key works after the restart')
})
