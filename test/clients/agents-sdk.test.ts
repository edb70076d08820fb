// The OpenAI Agents SDK for JavaScript (@openai/agents), unchanged, in its default mode (the
// Responses API), pointed at chatd's /api/v1 with a chatd key, one function tool: relayed to a
// scripted upstream, the SDK calls the tool, sends its output back and gets the answer, whole
// and streamed; on the real stories260k model a forced call is valid against the tool's schema
// and a free run ends well-formed (with no tool, the run completes with the story).
import t from 'tap'
import { Agent, OpenAIProvider, Runner, tool, type ModelSettings } from '@openai/agents'
import { z } from 'zod'
import { startStoriesServer } from '../helpers/stories-server.ts'
import { perDevice } from '../helpers/webgpu.ts'
import { ANSWER, MODEL, relayThroughChatd, sentBodies } from './harness.ts'

const weatherInput = z.object({ city: z.string() })
type WeatherInput = z.infer<typeof weatherInput>
const INSTRUCTIONS = 'Answer with the weather tool.'

const weatherOutput = (input: WeatherInput): string => `It is 3 degrees in ${input.city}.`

/** The weather tool as an SDK user writes it, with a zod schema; every input it runs with is recorded. */
function weatherTool (ran: WeatherInput[]) {
  return tool({
    name: 'get_weather',
    description: 'Weather in a city.',
    parameters: weatherInput,
    execute: async (input: WeatherInput) => {
      ran.push(input)
      return weatherOutput(input)
    },
  })
}

/**
 * The same tool in plain JSON Schema, not strict, as small as it gets: the SDK's zod schema
 * ($schema, additionalProperties) makes a tools block that, with auto tool choice, no longer fits
 * stories260k's 512-token context (chatd refuses that, context_length_exceeded).
 */
function smallWeatherTool (ran: unknown[]) {
  return tool({
    name: 'get_weather',
    description: 'Weather.',
    parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'], additionalProperties: true },
    strict: false,
    execute: async (input: unknown) => {
      ran.push(input)
      return 'It is 3 degrees.'
    },
  })
}

function weatherAgent (ran: WeatherInput[], model: string, opts: { modelSettings?: ModelSettings; stopOnTool?: boolean; instructions?: string; small?: boolean } = {}) {
  return new Agent({
    name: 'Weather',
    instructions: opts.instructions ?? INSTRUCTIONS,
    model,
    tools: [opts.small === true ? smallWeatherTool(ran) : weatherTool(ran)],
    modelSettings: opts.modelSettings,
    // The tool's output is the run's answer: one model turn, whatever the model is.
    toolUseBehavior: opts.stopOnTool === true ? 'stop_on_first_tool' : 'run_llm_again',
  })
}

/** A runner whose model provider is the SDK's own (its OpenAI client, Responses by default), on chatd; no traces leave the test. */
function runner (baseURL: string, apiKey: string): Runner {
  return new Runner({ modelProvider: new OpenAIProvider({ baseURL, apiKey }), tracingDisabled: true })
}

t.test('through an upstream, not streamed: the SDK calls the tool, sends its output back, gets the answer', async t => {
  const relay = await relayThroughChatd(t)
  const ran: WeatherInput[] = []
  const result = await runner(relay.baseURL, relay.key).run(weatherAgent(ran, MODEL), 'What is the weather in Oslo?')

  t.equal(result.finalOutput, ANSWER)
  t.same(ran, [{ city: 'Oslo' }], 'the tool ran once, with the arguments the model gave')
  t.same(result.newItems.map(item => item.type), ['tool_call_item', 'tool_call_output_item', 'message_output_item'])
  t.equal(result.rawResponses.length, 2)
  for (const response of result.rawResponses) t.ok(response.usage.inputTokens > 0 && response.usage.outputTokens > 0, 'each turn has its usage')

  const bodies = sentBodies(relay.upstream)
  t.equal(bodies.length, 2)
  const [first, second] = bodies
  t.same(first.messages[0], { role: 'system', content: INSTRUCTIONS }, 'the agent\'s instructions are the system prompt')
  t.match(first.tools, [{ type: 'function', function: { name: 'get_weather', description: 'Weather in a city.', parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] } } }])
  t.match(second.messages.at(-2), { role: 'assistant', tool_calls: [{ id: 'call_up1', type: 'function', function: { name: 'get_weather', arguments: '{"city":"Oslo"}' } }] })
  t.match(second.messages.at(-1), { role: 'tool', tool_call_id: 'call_up1', content: 'It is 3 degrees in Oslo.' })
})

t.test('through an upstream, streamed: the same loop, the answer streams as text deltas', async t => {
  const relay = await relayThroughChatd(t)
  const ran: WeatherInput[] = []
  const result = await runner(relay.baseURL, relay.key).run(weatherAgent(ran, MODEL), 'What is the weather in Oslo?', { stream: true })
  let text = ''
  const rawTypes = new Set<string>()
  for await (const event of result) {
    if (event.type !== 'raw_model_stream_event') continue
    rawTypes.add(event.data.type)
    if (event.data.type === 'output_text_delta') text += event.data.delta
  }
  await result.completed
  t.equal(result.error, null, 'no error')
  t.equal(result.finalOutput, ANSWER)
  t.equal(text, ANSWER, 'the deltas add up to the answer')
  t.ok(rawTypes.has('response_done'), 'each turn ends with its completed response')
  t.same(ran, [{ city: 'Oslo' }])
  const bodies = sentBodies(relay.upstream)
  t.equal(bodies.length, 2)
  t.ok(bodies.every(body => body.stream === true), 'streamed on to the upstream')
  t.match(bodies[1].messages.at(-1), { role: 'tool', tool_call_id: 'call_up1', content: 'It is 3 degrees in Oslo.' })
})

/** Runs the agent whole or streamed (the stream read to its end); the error, when the run fails. */
async function runAgent (run: Runner, agent: Agent<any, any>, input: string, stream: boolean) {
  try {
    if (!stream) return await run.run(agent, input)
    const result = await run.run(agent, input, { stream: true })
    for await (const event of result) void event
    await result.completed
    return result
  } catch (error) {
    return error as Error
  }
}

t.test('on stories260k: a required tool choice gives a call valid against the schema; a free run ends well-formed; with no tool the story completes', async t => {
  const KEY = `sk-chatd-${'agentSdk'.repeat(4)}`
  const server = await startStoriesServer(t, { modelId: 'stories260k', key: KEY })
  const run = runner(`${server.url}/api/v1`, KEY)
  const answers: string[] = []

  // On a software renderer (the WebGPU twin in CI, ~20x slower a token) the streamed runs alone: the
  // story is ~340 tokens, and whole and streamed differ in their framing, which the CPU run checks.
  const modes = perDevice({ cpu: [false, true], webgpu: [true] })
  for (const stream of modes) {
    const how = stream ? 'streamed' : 'whole'
    const ran: WeatherInput[] = []
    // stories260k writes stories, not calls: chatd's grammar makes the forced call well-formed.
    const result = await runAgent(run, weatherAgent(ran, 'stories260k', { modelSettings: { toolChoice: 'required', temperature: 0 }, stopOnTool: true }), 'Oslo?', stream)
    if (result instanceof Error) {
      t.fail(`${how}, tool choice required: ${result.message}`)
      continue
    }
    t.equal(ran.length, 1, `${how}: the tool ran once`)
    t.ok(weatherInput.safeParse(ran[0]).success, `${how}: with valid arguments: ${JSON.stringify(ran[0])}`)
    t.equal(result.finalOutput, weatherOutput(ran[0]), `${how}: the tool's output ends the run`)
    const call = result.rawResponses[0]?.output.find(item => item.type === 'function_call')
    t.match(call, { type: 'function_call', name: 'get_weather', callId: /\S/ }, `${how}: the call as the SDK reads it`)

    // With the tool offered and the choice left to the model: whatever it writes is a message or a
    // valid call. The SDK counts a response cut at the context's end (status incomplete) as a
    // failed run: that is the one other outcome allowed, and it must say so.
    const free: unknown[] = []
    const outcome = await runAgent(run, weatherAgent(free as WeatherInput[], 'stories260k', { modelSettings: { temperature: 0 }, stopOnTool: true, instructions: '', small: true }), 'Oslo?', stream)
    if (outcome instanceof Error) {
      t.match(outcome.message, /unsuccessful terminal state "response\.incomplete"/, `${how}, auto: only a reply cut at the context's end fails the run`)
    } else {
      const output = outcome.rawResponses[0]?.output ?? []
      t.ok(output.length > 0 && output.every(item => item.type === 'message' || item.type === 'function_call' || item.type === 'reasoning'), `${how}, auto: output items the SDK knows: ${JSON.stringify(output).slice(0, 300)}`)
      for (const input of free) t.ok(weatherInput.safeParse(input).success, `${how}, auto: a call, valid: ${JSON.stringify(input)}`)
      t.type(outcome.finalOutput, 'string', `${how}, auto: the run ends with an answer`)
    }

    // No tool: the story ends where the model ends it, and the run completes with it.
    const plain = await runAgent(run, new Agent({ name: 'Teller', instructions: '', model: 'stories260k', modelSettings: { temperature: 0 } }), 'Once upon a time', stream)
    if (plain instanceof Error) {
      t.fail(`${how}, no tool: ${plain.message}`)
      continue
    }
    const [message, ...rest] = plain.rawResponses[0]?.output ?? []
    t.same(rest, [], `${how}, no tool: one output item`)
    t.match(message, { type: 'message', role: 'assistant', status: 'completed', content: [{ type: 'output_text', text: plain.finalOutput }] }, `${how}, no tool: a message whose text is the answer`)
    t.ok(typeof plain.finalOutput === 'string' && plain.finalOutput.length > 0, `${how}, no tool: an answer`)
    t.ok((plain.rawResponses[0]?.usage.outputTokens ?? 0) > 0, `${how}, no tool: its usage`)
    answers.push(plain.finalOutput ?? '')
  }
  if (modes.length === 2) t.equal(answers[0], answers[1], 'whole and streamed: the same story at temperature 0')
})
