// A forced tool call (tool_choice required) that the local engine completes on the last token
// max_tokens allows is a call on every door: the real stories260k model writes
// {"city": "Yes,"} for this prompt in exactly 60 tokens, its closing included. With max_tokens 60
// (and 59, cut inside the closing after whole arguments) each door answers a call: chat
// completions finish_reason "tool_calls", Messages stop_reason "tool_use", Responses status
// "completed" (the Agents SDK fails a run on "incomplete"); streamed the same. Cut inside the
// arguments, the reply is still what it is: cut.
import t from 'tap'
import { streamData } from '../helpers/sse-events.ts'
import { startStoriesServer } from '../helpers/stories-server.ts'

const KEY = `sk-chatd-${'lastToken'.repeat(4).slice(0, 32)}`
const CITY = { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] }
const PROMPT = 'What is the weather in Oslo?'
/** What the model writes for PROMPT with max_tokens to spare: the call and its length in tokens. */
const CALL_TOKENS = 60
const ARGUMENTS = { city: 'Yes,' }

interface ChunkChoice { finish_reason: string | null; delta: { tool_calls?: Array<{ function?: { arguments?: string } }> } }

/** The SSE stream's events' data (the [DONE] left out). */
function events (body: string): Array<Record<string, unknown>> {
  return streamData(body).filter(data => data !== '[DONE]')
}

t.test('stories260k: a forced call completed on the last allowed token is a call on all three doors', async t => {
  const server = await startStoriesServer(t, { modelId: 'stories260k', key: KEY })
  const headers = { authorization: `Bearer ${KEY}` }
  const post = async (url: string, payload: Record<string, unknown>) => server.app.inject({ method: 'POST', url, headers, payload })

  const chat = async (maxTokens: number, stream = false) => post('/api/v1/chat/completions', {
    model: 'stories260k',
    messages: [{ role: 'user', content: PROMPT }],
    tools: [{ type: 'function', function: { name: 'get_weather', description: 'The weather in a city.', parameters: CITY } }],
    tool_choice: 'required',
    max_tokens: maxTokens,
    temperature: 0,
    ...(stream ? { stream: true, stream_options: { include_usage: true } } : {}),
  })

  // The premise: with room to spare, the call takes exactly CALL_TOKENS tokens.
  const roomy = (await chat(2 * CALL_TOKENS)).json()
  t.equal(roomy.choices[0].finish_reason, 'tool_calls')
  t.equal(roomy.usage.completion_tokens, CALL_TOKENS, 'the call is 60 tokens long, its closing included')
  t.same(JSON.parse(roomy.choices[0].message.tool_calls[0].function.arguments), ARGUMENTS)

  for (const max of [CALL_TOKENS, CALL_TOKENS - 1]) {
    const whole = (await chat(max)).json()
    t.equal(whole.choices[0].finish_reason, 'tool_calls', `chat, max_tokens ${max}: a call`)
    t.equal(whole.usage.completion_tokens, max)
    t.same(JSON.parse(whole.choices[0].message.tool_calls[0].function.arguments), ARGUMENTS, `chat, max_tokens ${max}: the arguments, nothing of the closing`)
    const streamed = events((await chat(max, true)).body).flatMap(e => (e as { choices?: ChunkChoice[] }).choices ?? [])
    t.same(streamed.flatMap(c => c.finish_reason ? [c.finish_reason] : []), ['tool_calls'], `chat streamed, max_tokens ${max}`)
    const args = streamed.flatMap(c => c.delta.tool_calls ?? []).map(c => c.function?.arguments ?? '').join('')
    t.same(JSON.parse(args), ARGUMENTS, `chat streamed, max_tokens ${max}: the same arguments`)
  }

  const messages = async (stream: boolean) => post('/api/v1/messages', {
    model: 'stories260k',
    messages: [{ role: 'user', content: PROMPT }],
    tools: [{ name: 'get_weather', description: 'The weather in a city.', input_schema: CITY }],
    tool_choice: { type: 'any' },
    max_tokens: CALL_TOKENS,
    temperature: 0,
    ...(stream ? { stream: true } : {}),
  })
  const message = (await messages(false)).json()
  t.equal(message.stop_reason, 'tool_use', 'Messages: stop_reason tool_use')
  t.match(message.content, [{ type: 'tool_use', name: 'get_weather', input: ARGUMENTS }])
  const messageDelta = events((await messages(true)).body).find(e => e.type === 'message_delta')
  t.match(messageDelta, { delta: { stop_reason: 'tool_use' } }, 'Messages streamed: stop_reason tool_use')

  const responses = async (stream: boolean) => post('/api/v1/responses', {
    model: 'stories260k',
    input: PROMPT,
    tools: [{ type: 'function', name: 'get_weather', description: 'The weather in a city.', parameters: CITY }],
    tool_choice: 'required',
    max_output_tokens: CALL_TOKENS,
    temperature: 0,
    store: false,
    ...(stream ? { stream: true } : {}),
  })
  const response = (await responses(false)).json()
  t.equal(response.status, 'completed', 'Responses: completed')
  t.equal(response.incomplete_details, null)
  t.match(response.output, [{ type: 'function_call', name: 'get_weather', status: 'completed' }])
  t.same(JSON.parse(response.output[0].arguments), ARGUMENTS)
  const responseEvents = events((await responses(true)).body)
  t.equal(responseEvents.at(-1)?.type, 'response.completed', 'Responses streamed: response.completed')

  // Cut inside the arguments: still cut, on every door.
  const cut = (await chat(CALL_TOKENS - 12)).json()
  t.equal(cut.choices[0].finish_reason, 'length', 'arguments unfinished: length')
  t.throws(() => JSON.parse(cut.choices[0].message.tool_calls[0].function.arguments), 'the arguments as far as they got')
})
