// The official `openai` SDK's Responses client against chatd on the real
// stories260k model: responses.create whole and streamed (the stream's deltas
// add up to the whole response, greedy decoding), responses.stream, a function
// call written by construction and its output sent back, text.format
// json_schema through the zod helper (responses.parse), a reply cut by
// max_output_tokens, and a refusal as the SDK's error with its param.

import t from 'tap'
import OpenAI from 'openai'
import { zodTextFormat } from 'openai/helpers/zod'
import { z } from 'zod'
import { startStoriesServer } from '../helpers/stories-server.ts'

const MODEL = 'stories260k'
const KEY = `sk-chatd-${'respSdk1'.repeat(4)}`
const server = await startStoriesServer(t, { modelId: MODEL, key: KEY })
const client = new OpenAI({ apiKey: KEY, baseURL: `${server.url}/api/v1`, maxRetries: 0 })

const cityTool: OpenAI.Responses.FunctionTool = {
  type: 'function',
  name: 'get_weather',
  description: 'The weather in a city.',
  parameters: { type: 'object', properties: { city: { type: 'string', maxLength: 12 } }, required: ['city'], additionalProperties: false },
  strict: true,
}

t.test('responses.create, whole and streamed: the stream\'s deltas add up to the whole response', async t => {
  const request = { model: MODEL, input: 'Once upon a time, there was a dog', instructions: 'Tell a story.', temperature: 0, max_output_tokens: 40 }
  const whole = await client.responses.create(request)
  t.match(whole.id, /^resp_/)
  t.ok(['completed', 'incomplete'].includes(whole.status ?? ''), `status ${whole.status}`)
  t.ok(whole.output_text.length > 0, 'some text')
  t.equal(whole.model, MODEL)
  t.ok(whole.usage!.input_tokens > 0 && whole.usage!.output_tokens > 0 && whole.usage!.output_tokens <= 40)
  t.equal(whole.usage!.total_tokens, whole.usage!.input_tokens + whole.usage!.output_tokens)

  const stream = await client.responses.create({ ...request, stream: true })
  let text = ''
  let final: OpenAI.Responses.Response | undefined
  const types: string[] = []
  for await (const event of stream) {
    types.push(event.type)
    if (event.type === 'response.output_text.delta') text += event.delta
    if (event.type === 'response.completed' || event.type === 'response.incomplete') final = event.response
  }
  t.equal(types[0], 'response.created')
  t.equal(text, whole.output_text, 'the deltas are the whole response\'s text')
  t.equal(final?.usage?.input_tokens, whole.usage?.input_tokens)
  t.equal(final?.usage?.output_tokens, whole.usage?.output_tokens)
  t.ok((final?.usage?.input_tokens_details.cached_tokens ?? 0) > 0, 'the same prompt again reuses the account\'s prefix cache')
  t.equal(final?.status, whole.status)
})

t.test('responses.stream: the helper assembles the same response', async t => {
  const request = { model: MODEL, input: [{ role: 'user' as const, content: 'Lily saw a cat' }], temperature: 0, max_output_tokens: 30 }
  const whole = await client.responses.create(request)
  const stream = client.responses.stream(request)
  let deltas = ''
  stream.on('response.output_text.delta', event => { deltas += event.delta })
  const final = await stream.finalResponse()
  t.equal(final.output_text, whole.output_text)
  t.equal(deltas, whole.output_text)
  t.same(final.output.map(item => item.type), whole.output.map(item => item.type))
})

t.test('a function call written by construction, and its output sent back', async t => {
  const input: OpenAI.Responses.ResponseInput = [{ role: 'user', content: 'What is the weather in Oslo?' }]
  const first = await client.responses.create({ model: MODEL, input, tools: [cityTool], tool_choice: 'required', temperature: 1 })
  const call = first.output.find(item => item.type === 'function_call')
  t.ok(call, 'a function_call item')
  if (call?.type !== 'function_call') return
  t.equal(call.name, 'get_weather')
  t.match(call.call_id, /^call_/)
  const args = JSON.parse(call.arguments)
  t.equal(typeof args.city, 'string', `arguments ${call.arguments} follow the schema`)

  const streamed = client.responses.stream({ model: MODEL, input, tools: [cityTool], tool_choice: { type: 'function', name: 'get_weather' }, temperature: 1 })
  const done = await streamed.finalResponse()
  t.equal(done.output.find(item => item.type === 'function_call')?.type, 'function_call', 'streamed, the same kind of item')

  const second = await client.responses.create({
    model: MODEL,
    // Without tools: the small model's 512-token context has no room for the tools block again.
    input: [...input, call, { type: 'function_call_output', call_id: call.call_id, output: 'It is 3 degrees.' }],
    temperature: 0,
    max_output_tokens: 20,
  })
  t.ok(['completed', 'incomplete'].includes(second.status ?? ''))
  t.ok(second.output_text.length > 0, 'the model answers after the output')
})

t.test('text.format json_schema through the zod helper: output_parsed follows the schema', async t => {
  const Pet = z.object({ name: z.string().max(12), legs: z.number().int() })
  const parsed = await client.responses.parse({ model: MODEL, input: 'Describe a pet.', text: { format: zodTextFormat(Pet, 'pet') }, temperature: 1 })
  t.equal(parsed.status, 'completed')
  t.ok(parsed.output_parsed, `parsed: ${parsed.output_text}`)
  t.equal(typeof parsed.output_parsed?.name, 'string')
  t.ok(Number.isInteger(parsed.output_parsed?.legs))
})

t.test('max_output_tokens: incomplete with its reason', async t => {
  const cut = await client.responses.create({ model: MODEL, input: 'Once upon a time', temperature: 0, max_output_tokens: 3 })
  t.equal(cut.status, 'incomplete')
  t.same(cut.incomplete_details, { reason: 'max_output_tokens' })
  t.equal(cut.usage?.output_tokens, 3)
})

t.test('a refusal is the SDK\'s error, naming the field', async t => {
  const refusal = async (body: OpenAI.Responses.ResponseCreateParamsNonStreaming) => {
    try {
      await client.responses.create(body)
    } catch (err) {
      return err as InstanceType<typeof OpenAI.APIError>
    }
    throw new Error('accepted')
  }
  const image = await refusal({ model: MODEL, input: [{ role: 'user', content: [{ type: 'input_image', image_url: 'data:image/png;base64,AA==', detail: 'auto' }] }] })
  t.match(image, { status: 400, param: 'input[0].content[0]', code: 'invalid_parameter' })
  t.match(await refusal({ model: MODEL, input: 'x', background: true }), { status: 400, param: 'background' })
})

t.test('previous_response_id: responses.retrieve, and a chained turn that reuses the first turn\'s prefix cache', async t => {
  const first = await client.responses.create({ model: MODEL, input: 'Once upon a time, there was a dog named Max', temperature: 0, max_output_tokens: 20 })
  const again = await client.responses.retrieve(first.id)
  t.same(again.output, first.output, 'retrieved as returned')
  const second = await client.responses.create({ model: MODEL, previous_response_id: first.id, input: 'What did Max do?', temperature: 0, max_output_tokens: 20 })
  t.equal(second.previous_response_id, first.id)
  t.ok(second.usage!.input_tokens > first.usage!.input_tokens + first.usage!.output_tokens, 'the first turn, its reply and the new message')
  t.ok(second.usage!.input_tokens_details.cached_tokens >= first.usage!.input_tokens, `the chained turn reuses the first turn's cache (${second.usage!.input_tokens_details.cached_tokens} of ${second.usage!.input_tokens} cached)`)
})
