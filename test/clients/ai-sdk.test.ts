// The Vercel AI SDK (`ai` with `@ai-sdk/openai-compatible`), unchanged, pointed at chatd's
// /api/v1 with a chatd key: every body it sends is accepted as sent; generateText with
// toolChoice 'required' gets the call with its input parsed and valid; the multi-step loop runs
// the tool, sends its result back and ends with the answer; streamText streams the call. The
// model is relayed to a scripted upstream on loopback; stories260k answers the same bodies.
import t from 'tap'
import { generateText, jsonSchema, Output, stepCountIs, streamText, tool } from 'ai'
import { createOpenAICompatible } from '@ai-sdk/openai-compatible'
import { z } from 'zod'
import { startStoriesServer } from '../helpers/stories-server.ts'
import { perDevice } from '../helpers/webgpu.ts'
import { ANSWER, callThenAnswer, captureServer, MODEL, relayThroughChatd, replayCaptured, sentBodies } from './harness.ts'

const CHAT = '/api/v1/chat/completions'
const weatherInput = z.object({
  city: z.string().min(1),
  unit: z.enum(['celsius', 'fahrenheit']).optional(),
  days: z.number().int().min(1).max(7).optional(),
})
type WeatherInput = z.infer<typeof weatherInput>

const provider = (baseURL: string, apiKey: string) => createOpenAICompatible({ name: 'chatd', baseURL, apiKey, includeUsage: true, supportsStructuredOutputs: true })

/** The weather tool as an AI SDK user writes it; every input it runs with is recorded. */
function weatherTool (ran: WeatherInput[] = [], strict?: boolean) {
  return tool({
    description: 'The weather in a city.',
    inputSchema: weatherInput,
    strict,
    execute: async (input: WeatherInput) => {
      ran.push(input)
      return { city: input.city, temp: 3 }
    },
  })
}

/** Each way the tests below use the SDK, against a client pointed at `baseURL`. */
const uses: Record<string, (baseURL: string, apiKey: string, model: string) => Promise<unknown>> = {
  'generateText, toolChoice required': (baseURL, apiKey, model) => generateText({ model: provider(baseURL, apiKey)(model), maxRetries: 0, system: 'Use tools.', prompt: 'Weather in Oslo?', tools: { get_weather: weatherTool() }, toolChoice: 'required', stopWhen: stepCountIs(1) }),
  'generateText, a multi-step loop': (baseURL, apiKey, model) => generateText({ model: provider(baseURL, apiKey)(model), maxRetries: 0, prompt: 'Weather in Oslo?', tools: { get_weather: weatherTool() }, stopWhen: stepCountIs(3), maxOutputTokens: 50, temperature: 0, seed: 1 }),
  'generateText, a named tool and sampling options': (baseURL, apiKey, model) => generateText({
    model: provider(baseURL, apiKey)(model),
    maxRetries: 0,
    prompt: 'Weather in Oslo?',
    tools: { get_weather: weatherTool([], true) },
    toolChoice: { type: 'tool', toolName: 'get_weather' },
    stopWhen: stepCountIs(1),
    maxOutputTokens: 50,
    topP: 0.9,
    presencePenalty: 0.1,
    frequencyPenalty: 0.2,
    stopSequences: ['###'],
    seed: 3,
    providerOptions: { chatd: { user: 'u-1', reasoningEffort: 'low', parallelToolCalls: false } },
  }),
  'streamText with a JSON-schema tool': async (baseURL, apiKey, model) => {
    const result = streamText({ model: provider(baseURL, apiKey)(model), maxRetries: 0, prompt: 'Weather in Oslo?', maxOutputTokens: 50, tools: { get_weather: tool({ description: 'The weather in a city.', inputSchema: jsonSchema<{ city: string }>({ type: 'object', properties: { city: { type: 'string' } }, required: ['city'] }) }) } })
    return await result.response
  },
  'generateText with a structured output': (baseURL, apiKey, model) => generateText({ model: provider(baseURL, apiKey)(model), maxRetries: 0, prompt: 'A city as JSON.', maxOutputTokens: 30, output: Output.object({ schema: z.object({ city: z.string() }) }) }),
}

t.test('every body the SDK sends is accepted by chatd as sent (relayed, and on stories260k)', async t => {
  const capture = await captureServer(t)
  for (const use of Object.values(uses)) await use(capture.baseURL, 'k', 'm').catch(() => {})
  const bodies = capture.bodies()
  t.ok(bodies.length >= Object.keys(uses).length, `captured ${bodies.length} bodies`)
  t.match(bodies[0], { tool_choice: 'required', tools: [{ type: 'function', function: { name: 'get_weather', parameters: { $schema: /json-schema/ } } }] }, 'what the SDK sends for toolChoice required')
  t.ok(bodies.some(b => b.stream === true && (b.stream_options as { include_usage?: boolean } | undefined)?.include_usage === true), 'streamText asks for usage')
  t.ok(bodies.some(b => (b.messages as Array<{ role: string }>).some(m => m.role === 'tool')), 'the loop\'s second step carries the tool result')

  await replayCaptured(t, bodies, `sk-chatd-${'aiSdkTst'.repeat(4)}`)
})

t.test('generateText with toolChoice required: the call comes back with its input parsed and valid', async t => {
  const relay = await relayThroughChatd(t)
  const result = await generateText({ model: provider(relay.baseURL, relay.key)(MODEL), maxRetries: 0, prompt: 'Weather in Oslo?', tools: { get_weather: weatherTool() }, toolChoice: 'required', stopWhen: stepCountIs(1) })
  t.equal(result.finishReason, 'tool-calls')
  t.equal(result.toolCalls.length, 1)
  const [call] = result.toolCalls
  t.match(call, { toolName: 'get_weather', toolCallId: 'call_up1', input: { city: 'Oslo' } })
  t.not(call.invalid, true, 'the SDK found the input valid against the tool\'s schema')
  t.ok(weatherInput.safeParse(call.input).success)
  t.equal(sentBodies(relay.upstream)[0].tool_choice, 'required', 'chatd passed the choice on')
})

t.test('the multi-step loop: the tool runs, its result goes back as a tool message, the answer ends it', async t => {
  const relay = await relayThroughChatd(t)
  const ran: WeatherInput[] = []
  const result = await generateText({ model: provider(relay.baseURL, relay.key)(MODEL), maxRetries: 0, prompt: 'Weather in Oslo?', tools: { get_weather: weatherTool(ran) }, stopWhen: stepCountIs(5) })
  t.equal(result.text, ANSWER)
  t.equal(result.finishReason, 'stop')
  t.equal(result.steps.length, 2, 'a call, then the answer')
  t.same(ran, [{ city: 'Oslo' }], 'the tool ran once, with the parsed input')
  const second = sentBodies(relay.upstream)[1]
  t.match(second.messages.at(-2), { role: 'assistant', content: null, tool_calls: [{ id: 'call_up1', type: 'function', function: { name: 'get_weather', arguments: '{"city":"Oslo"}' } }] })
  t.same(second.messages.at(-1), { role: 'tool', tool_call_id: 'call_up1', content: '{"city":"Oslo","temp":3}' })
  t.equal(result.totalUsage.inputTokens, 40, 'usage of both steps, as chatd reported it')
})

t.test('the loop with a reasoning model: the thinking comes back as reasoning, and the next step, which sends it back, is accepted', async t => {
  const script = callThenAnswer({ calls: ['{"city":"Oslo"}'], reasoning: 'The user wants Oslo.' })
  const capture = await captureServer(t, script)
  await generateText({ model: provider(capture.baseURL, 'k')('m'), maxRetries: 0, prompt: 'Weather in Oslo?', tools: { get_weather: weatherTool() }, stopWhen: stepCountIs(5) })
  const secondStep = capture.bodies()[1]
  t.match((secondStep.messages as unknown[]).at(-2), { role: 'assistant', reasoning_content: 'The user wants Oslo.' }, 'the SDK sends the thinking back on the assistant message')

  const relay = await relayThroughChatd(t, script, { reasoning: 'separate' })
  const replay = await relay.app.inject({ method: 'POST', url: CHAT, headers: relay.auth, payload: { ...secondStep, model: MODEL } })
  t.equal(replay.statusCode, 200, replay.body)
  t.notOk('reasoning_content' in sentBodies(relay.upstream)[0].messages.at(-2), 'earlier thinking is not sent on (docs/api.md)')
  for (const stream of [false, true]) {
    const ran: WeatherInput[] = []
    const opts = { model: provider(relay.baseURL, relay.key)(MODEL), maxRetries: 0, prompt: 'Weather in Oslo?', tools: { get_weather: weatherTool(ran) }, stopWhen: stepCountIs(5) }
    const result = stream ? streamText(opts) : await generateText(opts)
    t.equal(await result.text, ANSWER, `${stream ? 'streamed' : 'whole'}: the answer`)
    const steps = await result.steps
    t.equal(steps[0].reasoningText, 'The user wants Oslo.', 'chatd\'s reasoning_content is the SDK\'s reasoning')
    t.same(ran, [{ city: 'Oslo' }])
  }
})

t.test('streamText: the call streams as input deltas and arrives parsed, however its arguments are cut', async t => {
  const args = '{"city":"Oslo","unit":"celsius","days":3}'
  let cut = 0
  const relay = await relayThroughChatd(t, (req, res, recorded, index) => callThenAnswer({ calls: [args], cuts: [cut, 1, 5] })(req, res, recorded, index))
  for (cut = 0; cut < args.length; cut++) {
    const result = streamText({ model: provider(relay.baseURL, relay.key)(MODEL), maxRetries: 0, prompt: 'Weather in Oslo?', tools: { get_weather: tool({ description: 'The weather in a city.', inputSchema: weatherInput }) }, toolChoice: 'required' })
    let deltas = ''
    const calls: unknown[] = []
    for await (const part of result.fullStream) {
      if (part.type === 'tool-input-delta') deltas += part.delta
      if (part.type === 'tool-call') calls.push(part)
      if (part.type === 'error') t.fail(String(part.error))
    }
    t.equal(deltas, args, `cut at ${cut}: the deltas make the arguments`)
    t.equal(calls.length, 1)
    t.match(calls[0], { toolName: 'get_weather', input: { city: 'Oslo', unit: 'celsius', days: 3 } })
    t.not((calls[0] as { invalid?: boolean }).invalid, true)
    t.ok(weatherInput.safeParse((calls[0] as { input: unknown }).input).success, `cut at ${cut}: valid against the schema`)
    t.equal(await result.finishReason, 'tool-calls')
  }
})

t.test('arguments valid against the schema in every form: each call\'s input parses and validates', async t => {
  const forms = ['{"city":"Oslo"}', '{"city":"Bergen","unit":"fahrenheit"}', '{ "days": 7, "city": "Tromsø" }', '{"city":"Ålesund \\"north\\"","days":1}']
  const relay = await relayThroughChatd(t, callThenAnswer({ calls: forms }))
  for (const stream of [false, true]) {
    const opts = { model: provider(relay.baseURL, relay.key)(MODEL), maxRetries: 0, prompt: 'Weather?', tools: { get_weather: weatherTool() }, toolChoice: 'required' as const, stopWhen: stepCountIs(1) }
    const calls = stream ? await streamText(opts).toolCalls : (await generateText(opts)).toolCalls
    t.equal(calls.length, forms.length, `${stream ? 'streamed' : 'whole'}: every parallel call`)
    calls.forEach((call, i) => {
      t.same(call.input, JSON.parse(forms[i]), `${stream ? 'streamed' : 'whole'} call ${i}: the input as sent`)
      t.ok(weatherInput.safeParse(call.input).success)
      t.not(call.invalid, true)
    })
  }
})

t.test('on stories260k: auto answers; required gives a call valid against the schema', async t => {
  const KEY = `sk-chatd-${'aiSdkTst'.repeat(4)}`
  const server = await startStoriesServer(t, { modelId: 'stories260k', key: KEY })
  // A small tool in plain JSON Schema: stories260k's context is 512 tokens, and the tools block is in the prompt.
  const cityInput = z.object({ city: z.string() })
  const tools = { get_weather: tool({ description: 'Weather.', inputSchema: jsonSchema<{ city: string }>({ type: 'object', properties: { city: { type: 'string' } }, required: ['city'] }), execute: async () => ({ temp: 3 }) }) }
  const model = provider(`${server.url}/api/v1`, KEY)('stories260k')

  const auto = await generateText({ model, maxRetries: 0, prompt: 'Oslo?', tools, stopWhen: stepCountIs(1), maxOutputTokens: 16, temperature: 0 })
  t.ok(['stop', 'length', 'tool-calls'].includes(auto.finishReason), `auto: an answer (${auto.finishReason})`)
  for (const call of auto.toolCalls) t.ok(cityInput.safeParse(call.input).success, `auto: a call, valid: ${JSON.stringify(call.input)}`)
  const streamed = streamText({ model, maxRetries: 0, prompt: 'Oslo?', tools, stopWhen: stepCountIs(1), maxOutputTokens: 16, temperature: 0 })
  for await (const part of streamed.fullStream) if (part.type === 'error') t.fail(String(part.error))
  t.equal(await streamed.text, auto.text, 'auto, streamed: the same answer at temperature 0')
  t.equal((await streamed.totalUsage).outputTokens, auto.usage.outputTokens)

  // One seed on a software renderer (the WebGPU twin in CI), which decodes ~20x slower.
  for (let seed = 0; seed < perDevice({ cpu: 3, webgpu: 1 }); seed++) {
    // Room for the whole call: max_tokens counts every token written, the forced closing included.
    const outcome = await generateText({ model, maxRetries: 0, prompt: 'Oslo?', tools, toolChoice: 'required', stopWhen: stepCountIs(1), maxOutputTokens: 160, seed })
      .catch((error: unknown) => error as Error)
    if (outcome instanceof Error) {
      t.fail(`required, seed ${seed}: ${outcome.message}`)
      continue
    }
    t.ok(outcome.toolCalls.length >= 1, `required, seed ${seed}: a call`)
    for (const call of outcome.toolCalls) t.ok(cityInput.safeParse(call.input).success, `required, seed ${seed}: ${JSON.stringify(call.input)} is valid`)
  }
})
