// LangChain's ChatOpenAI (`@langchain/openai`), unchanged, with configuration.baseURL at
// chatd's /api/v1 and a chatd key: every body it sends is accepted as sent; bindTools(...).invoke
// gets tool_calls with parsed args, valid against the tool's schema; streamed, the chunks
// concatenate to the same call; the usual loop sends a ToolMessage back and gets the answer.
// The model is relayed to a scripted upstream on loopback; stories260k answers the same bodies.
import t from 'tap'
import { ChatOpenAI } from '@langchain/openai'
import { AIMessageChunk, HumanMessage, type BaseMessage } from '@langchain/core/messages'
import { tool } from '@langchain/core/tools'
import { z } from 'zod'
import { startStoriesServer } from '../helpers/stories-server.ts'
import { perDevice } from '../helpers/webgpu.ts'
import { ANSWER, callThenAnswer, captureServer, MODEL, relayThroughChatd, replayCaptured, sentBodies } from './harness.ts'

const weatherInput = z.object({
  city: z.string().min(1),
  unit: z.enum(['celsius', 'fahrenheit']).optional(),
  days: z.number().int().min(1).max(7).optional(),
})
type WeatherInput = z.infer<typeof weatherInput>

const weatherSpec = { name: 'get_weather', description: 'The weather in a city.', schema: weatherInput }

const chat = (baseURL: string, apiKey: string, model: string, extra: Record<string, unknown> = {}) => new ChatOpenAI({ model, apiKey, configuration: { baseURL }, maxRetries: 0, ...extra })

/** Drains a stream into one message, as LangChain users do. */
async function concatStream (stream: AsyncIterable<AIMessageChunk>): Promise<AIMessageChunk> {
  let whole: AIMessageChunk | undefined
  for await (const piece of stream) whole = whole ? whole.concat(piece) : piece
  if (!whole) throw new Error('an empty stream')
  return whole
}

/** Each way the tests below use ChatOpenAI, against a client pointed at `baseURL`. */
const uses: Record<string, (baseURL: string, apiKey: string, model: string) => Promise<unknown>> = {
  'bindTools().invoke': (baseURL, apiKey, model) => chat(baseURL, apiKey, model).bindTools([weatherSpec]).invoke('Weather in Oslo?'),
  'bindTools with tool_choice any, strict, no parallel calls, and sampling options': (baseURL, apiKey, model) => chat(baseURL, apiKey, model, {
    temperature: 0.5, topP: 0.9, maxTokens: 30, n: 1, logprobs: true, topLogprobs: 2, presencePenalty: 0.1, frequencyPenalty: 0.1, stop: ['###'], user: 'u-1',
  }).bindTools([weatherSpec], { tool_choice: 'any', strict: true, parallel_tool_calls: false }).invoke('Weather in Oslo?'),
  'bindTools().stream, a named tool': async (baseURL, apiKey, model) => concatStream(await chat(baseURL, apiKey, model, { streamUsage: true }).bindTools([weatherSpec], { tool_choice: 'get_weather' }).stream('Weather in Oslo?')),
  'withStructuredOutput (json schema)': (baseURL, apiKey, model) => chat(baseURL, apiKey, model, { maxTokens: 30 }).withStructuredOutput(z.object({ city: z.string() })).invoke('A city.'),
  'withStructuredOutput (function calling)': (baseURL, apiKey, model) => chat(baseURL, apiKey, model, { maxTokens: 30 }).withStructuredOutput(z.object({ city: z.string() }), { method: 'functionCalling' }).invoke('A city.'),
}

t.test('every body ChatOpenAI sends is accepted by chatd as sent (relayed, and on stories260k)', async t => {
  const capture = await captureServer(t)
  for (const use of Object.values(uses)) await use(capture.baseURL, 'k', 'm').catch(() => {})
  const bodies = capture.bodies()
  t.equal(bodies.length, Object.keys(uses).length, 'one body each')
  t.match(bodies[1], { tool_choice: 'required', parallel_tool_calls: false, n: 1, logprobs: true, top_logprobs: 2, tools: [{ function: { strict: true, parameters: { $schema: /json-schema/ } } }] }, 'what LangChain sends for tool_choice any')
  t.match(bodies[2], { stream: true, stream_options: { include_usage: true }, tool_choice: { type: 'function', function: { name: 'get_weather' } } })
  t.match(bodies[3], { response_format: { type: 'json_schema', json_schema: { strict: true } } })

  await replayCaptured(t, bodies, `sk-chatd-${'lgChain1'.repeat(4)}`)
})

t.test('bindTools().invoke: tool_calls with parsed args, valid against the schema', async t => {
  const relay = await relayThroughChatd(t)
  const reply = await chat(relay.baseURL, relay.key, MODEL).bindTools([weatherSpec], { tool_choice: 'any' }).invoke('Weather in Oslo?')
  t.same(reply.tool_calls, [{ name: 'get_weather', args: { city: 'Oslo' }, id: 'call_up1', type: 'tool_call' }])
  t.same(reply.invalid_tool_calls, [])
  t.ok(weatherInput.safeParse(reply.tool_calls?.[0].args).success)
  t.equal(reply.response_metadata.finish_reason, 'tool_calls')
  t.equal(sentBodies(relay.upstream)[0].tool_choice, 'required', 'any went through chatd as required')
})

t.test('bindTools().stream: the chunks concatenate to the same call, however its arguments are cut', async t => {
  const args = '{"city":"Oslo","unit":"celsius","days":3}'
  let cut = 0
  const relay = await relayThroughChatd(t, (req, res, recorded, index) => callThenAnswer({ calls: [args], cuts: [cut, 1, 5] })(req, res, recorded, index))
  const model = chat(relay.baseURL, relay.key, MODEL, { streamUsage: true }).bindTools([weatherSpec], { tool_choice: 'any' })
  for (cut = 0; cut < args.length; cut++) {
    const whole = await concatStream(await model.stream('Weather in Oslo?'))
    t.same(whole.tool_calls, [{ name: 'get_weather', args: { city: 'Oslo', unit: 'celsius', days: 3 }, id: 'call_up1', type: 'tool_call' }], `cut at ${cut}`)
    t.same(whole.invalid_tool_calls, [])
    t.ok(weatherInput.safeParse(whole.tool_calls?.[0].args).success)
    t.equal(whole.usage_metadata?.total_tokens, 29, 'the usage chunk came through')
  }
})

t.test('the tool loop: the call runs the tool, a ToolMessage goes back, the answer ends it', async t => {
  const relay = await relayThroughChatd(t)
  const ran: WeatherInput[] = []
  const getWeather = tool(async (input: WeatherInput) => {
    ran.push(input)
    return JSON.stringify({ city: input.city, temp: 3 })
  }, weatherSpec)
  const model = chat(relay.baseURL, relay.key, MODEL).bindTools([getWeather])
  const messages: BaseMessage[] = [new HumanMessage('Weather in Oslo?')]
  for (let step = 0; step < 5; step++) {
    const reply = await model.invoke(messages)
    messages.push(reply)
    if (!reply.tool_calls?.length) break
    for (const call of reply.tool_calls) messages.push(await getWeather.invoke(call))
  }
  t.equal(messages.at(-1)?.content, ANSWER)
  t.same(ran, [{ city: 'Oslo' }], 'the tool ran once, with the parsed args')
  const second = sentBodies(relay.upstream)[1]
  t.match(second.messages.at(-2), { role: 'assistant', tool_calls: [{ id: 'call_up1', type: 'function', function: { name: 'get_weather', arguments: '{"city":"Oslo"}' } }] })
  t.same(second.messages.at(-1), { role: 'tool', tool_call_id: 'call_up1', content: '{"city":"Oslo","temp":3}' })
})

t.test('arguments in every form parse and validate, whole and streamed, several calls at once', async t => {
  const forms = ['{"city":"Oslo"}', '{"city":"Bergen","unit":"fahrenheit"}', '{ "days": 7, "city": "Tromsø" }', '{"city":"Ålesund \\"north\\"","days":1}']
  const relay = await relayThroughChatd(t, callThenAnswer({ calls: forms }))
  const model = chat(relay.baseURL, relay.key, MODEL).bindTools([weatherSpec], { tool_choice: 'any' })
  const whole = await model.invoke('Weather?')
  const streamed = await concatStream(await model.stream('Weather?'))
  for (const [how, reply] of [['whole', whole], ['streamed', streamed]] as const) {
    t.same(reply.tool_calls?.map(c => c.args), forms.map(f => JSON.parse(f)), `${how}: every call, args as sent`)
    t.same(reply.invalid_tool_calls, [])
    for (const call of reply.tool_calls ?? []) t.ok(weatherInput.safeParse(call.args).success, `${how}: ${JSON.stringify(call.args)} is valid`)
  }
})

t.test('on stories260k: auto answers; tool_choice any gives a call valid against the schema', async t => {
  const KEY = `sk-chatd-${'lgChain1'.repeat(4)}`
  const server = await startStoriesServer(t, { modelId: 'stories260k', key: KEY })
  // A small tool in plain JSON Schema: stories260k's context is 512 tokens, and the tools block is in the prompt.
  const cityInput = z.object({ city: z.string() })
  const small = { type: 'function' as const, function: { name: 'get_weather', description: 'Weather.', parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] } } }
  const model = chat(`${server.url}/api/v1`, KEY, 'stories260k', { maxTokens: 16, temperature: 0 })

  const auto = await model.bindTools([small]).invoke('Oslo?')
  t.type(auto.content, 'string', 'auto: an answer')
  t.same(auto.invalid_tool_calls ?? [], [], 'auto: no malformed call')
  for (const call of auto.tool_calls ?? []) t.ok(cityInput.safeParse(call.args).success, `auto: a call, valid: ${JSON.stringify(call.args)}`)
  const streamed = await concatStream(await model.bindTools([small]).stream('Oslo?'))
  t.equal(streamed.content, auto.content, 'auto, streamed: the same answer at temperature 0')

  // One seed on a software renderer (the WebGPU twin in CI), which decodes ~20x slower.
  for (let seed = 0; seed < perDevice({ cpu: 3, webgpu: 1 }); seed++) {
    const outcome = await chat(`${server.url}/api/v1`, KEY, 'stories260k', { maxTokens: 160, modelKwargs: { seed } }).bindTools([small], { tool_choice: 'any' }).invoke('Oslo?')
      .catch((error: unknown) => error as Error)
    if (outcome instanceof Error) {
      t.fail(`any, seed ${seed}: ${outcome.message}`)
      continue
    }
    t.ok((outcome.tool_calls ?? []).length >= 1, `any, seed ${seed}: a call`)
    t.same(outcome.invalid_tool_calls ?? [], [])
    for (const call of outcome.tool_calls ?? []) t.ok(cityInput.safeParse(call.args).success, `any, seed ${seed}: ${JSON.stringify(call.args)} is valid`)
  }
})
