// Traces (OTEL_EXPORTER_OTLP_ENDPOINT): a request's spans reach an OTLP
// collector (a stand-in that decodes the protobuf export) with the GenAI
// attributes on the model span; the caller's traceparent is honoured and a new
// one, naming chatd's upstream span, goes to the upstream model; prompts and
// outputs stay out of spans unless the operator opts in; and with tracing off
// nothing of the SDK is loaded.

import { join } from 'node:path'
import t from 'tap'
import { buildTestApp, chatBody } from '../helpers/app.ts'
import { otlpCollector, type CollectedSpan } from '../helpers/otlp-collector.ts'
import { runModuleSource } from '../helpers/node-script.ts'
import { REPO_ROOT } from '../helpers/models.ts'
import { chunk, loopbackServer, sseData, sseHead } from '../upstream/loopback.ts'
import { UpstreamBackend } from '../../src/engine/upstream/backend.ts'
import type { GenerateEvent } from '../../src/engine/backend.ts'
import { buildResponsesApp, ScriptBackend, usage } from '../helpers/responses-app.ts'

const TRACE_ID = '4bf92f3577b34da6a3ce929d0e0e4736'
const CALLER_SPAN = '00f067aa0ba902b7'
const MARKER = 'zebra-marmalade-7731'

const byName = (spans: CollectedSpan[], name: string): CollectedSpan => {
  const span = spans.find(s => s.name === name)
  if (!span) throw new Error(`no span named ${name}; got ${spans.map(s => s.name).join(', ')}`)
  return span
}

t.test('one trace per request: the caller\'s parent, auth, the model span with the GenAI attributes, limits, the backend call, the usage write', async t => {
  const collector = await otlpCollector(t)
  const test = await buildTestApp(t, { env: { OTEL_EXPORTER_OTLP_ENDPOINT: collector.url, OTEL_SERVICE_NAME: 'chatd-test' } })
  const res = await test.app.inject({
    method: 'POST',
    url: '/api/v1/chat/completions',
    headers: { ...test.auth, traceparent: `00-${TRACE_ID}-${CALLER_SPAN}-01` },
    payload: chatBody({ messages: [{ role: 'user', content: `Tell me about ${MARKER}` }], max_tokens: 50, temperature: 0.5 }),
  })
  t.equal(res.statusCode, 200)
  const usage = res.json().usage
  await test.app.close() // sends what the batch still holds
  await collector.waitFor(spans => spans.some(s => s.name === 'usage write'))
  const spans = collector.spans
  t.ok(spans.every(s => s.traceId === TRACE_ID), 'every span in the caller\'s trace')
  t.ok(spans.every(s => s.serviceName === 'chatd-test'), 'OTEL_SERVICE_NAME')
  t.ok(collector.contentTypes.every(type => type === 'application/x-protobuf'), 'OTLP/HTTP protobuf')

  const root = byName(spans, 'POST /api/v1/chat/completions')
  t.equal(root.parentSpanId, CALLER_SPAN, 'the request span\'s parent is the caller\'s span')
  t.equal(root.kind, 2, 'a server span')
  t.equal(root.attributes['http.response.status_code'], 200)
  t.equal(root.attributes['http.route'], '/api/v1/chat/completions')

  const auth = byName(spans, 'auth')
  t.equal(auth.parentSpanId, root.spanId)
  const model = byName(spans, 'chat scripted')
  t.equal(model.parentSpanId, root.spanId, 'the model span is the request\'s child')
  t.match(model.attributes, {
    'gen_ai.operation.name': 'chat',
    'gen_ai.provider.name': 'chatd',
    'gen_ai.request.model': 'scripted',
    'gen_ai.response.model': 'scripted',
    'gen_ai.request.max_tokens': 50,
    'gen_ai.request.temperature': 0.5,
    'gen_ai.usage.input_tokens': usage.prompt_tokens,
    'gen_ai.usage.output_tokens': usage.completion_tokens,
    'gen_ai.usage.cache_read.input_tokens': 0,
    'gen_ai.response.finish_reasons': ['stop'],
    'gen_ai.response.id': res.json().id,
    'chatd.account.id': test.account.id,
  })
  t.equal(typeof model.attributes['gen_ai.server.time_to_first_token'], 'number')
  for (const name of ['limits', 'usage write']) t.equal(byName(spans, name).parentSpanId, model.spanId, `${name} is the model span's child`)
  const call = byName(spans, 'upstream scripted')
  t.equal(call.parentSpanId, model.spanId)
  t.equal(call.kind, 3, 'the backend call is a client span')
  // The SDK starts each span on Date.now() (whole milliseconds), so two spans' times may differ by 1 ms.
  t.ok(model.endMs + 1 >= byName(spans, 'usage write').endMs, 'the model span ends after the usage row is written')
  t.notOk(Buffer.concat(collector.bodies).includes(MARKER), 'the prompt is in no span')
  t.notOk(Buffer.concat(collector.bodies).includes('upon a time'), 'nor the output')
  t.notOk(Buffer.concat(collector.bodies).includes(test.key.slice(9)), 'nor the key')
})

t.test('OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true puts prompts and outputs in the model span', async t => {
  const collector = await otlpCollector(t)
  const test = await buildTestApp(t, { env: { OTEL_EXPORTER_OTLP_ENDPOINT: collector.url, OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT: 'true' } })
  const res = await test.app.inject({ method: 'POST', url: '/api/v1/chat/completions', headers: test.auth, payload: chatBody({ messages: [{ role: 'user', content: MARKER }] }) })
  t.equal(res.statusCode, 200)
  // A conversation far past the attribute's bound: the newest message is kept, cut, as valid JSON.
  const long = await test.app.inject({ method: 'POST', url: '/api/v1/chat/completions', headers: test.auth, payload: chatBody({ messages: [{ role: 'user', content: 'a'.repeat(200_000) }, { role: 'assistant', content: 'b'.repeat(200_000) }, { role: 'user', content: 'c'.repeat(200_000) }] }) })
  t.equal(long.statusCode, 200)
  await test.app.close()
  await collector.waitFor(spans => spans.filter(s => s.name === 'chat scripted').length === 2)
  const [model, longModel] = collector.spans.filter(s => s.name === 'chat scripted')
  const input = JSON.parse(String(model.attributes['gen_ai.input.messages']))
  t.match(input.at(-1), { role: 'user', parts: [{ type: 'text', content: new RegExp(MARKER) }] })
  const output = JSON.parse(String(model.attributes['gen_ai.output.messages']))
  t.same(output, [{ role: 'assistant', parts: [{ type: 'text', content: 'Once upon a time' }], finish_reason: 'stop' }])
  const longInput = String(longModel.attributes['gen_ai.input.messages'])
  t.ok(longInput.length <= 66 * 1024, `bounded (${longInput.length} characters)`)
  const kept = JSON.parse(longInput)
  t.match(kept.at(-1), { role: 'user', parts: [{ content: /^c+$/ }] }, 'the newest message first')
})

t.test('the upstream model gets a traceparent naming chatd\'s upstream span, in the caller\'s trace', async t => {
  const upstream = await loopbackServer(t, async (_req, res) => {
    sseHead(res)
    sseData(res, chunk({ role: 'assistant', content: 'Hi' }))
    sseData(res, chunk({}, 'stop'))
    sseData(res, '[DONE]')
    res.end()
  })
  const collector = await otlpCollector(t)
  const backend = new UpstreamBackend({ id: 'relay', baseUrl: `${upstream.url}/v1`, upstreamModel: 'm' })
  const test = await buildTestApp(t, { backends: [backend], env: { OTEL_EXPORTER_OTLP_ENDPOINT: collector.url } })
  t.teardown(() => backend.close())
  const res = await test.app.inject({ method: 'POST', url: '/api/v1/chat/completions', headers: { ...test.auth, traceparent: `00-${TRACE_ID}-${CALLER_SPAN}-01`, tracestate: 'vendor=abc' }, payload: chatBody({ model: 'relay' }) })
  t.equal(res.statusCode, 200)
  await test.app.close()
  await collector.waitFor(spans => spans.some(s => s.name === 'upstream relay'))
  const call = byName(collector.spans, 'upstream relay')
  const sent = upstream.requests[0].headers
  t.equal(sent.traceparent, `00-${TRACE_ID}-${call.spanId}-01`, 'the upstream\'s parent is chatd\'s upstream span')
  t.equal(sent.tracestate, 'vendor=abc', 'tracestate passed on')
  t.ok(call.events.includes('response'), 'the upstream\'s status line is an event on the span')
})

t.test('a caller that says "not sampled" is not traced; a malformed traceparent starts a trace of its own', async t => {
  const collector = await otlpCollector(t)
  const test = await buildTestApp(t, { env: { OTEL_EXPORTER_OTLP_ENDPOINT: collector.url } })
  const unsampled = await test.app.inject({ method: 'POST', url: '/api/v1/chat/completions', headers: { ...test.auth, traceparent: `00-${TRACE_ID}-${CALLER_SPAN}-00` }, payload: chatBody() })
  t.equal(unsampled.statusCode, 200)
  for (const traceparent of ['garbage', `00-${'0'.repeat(32)}-${CALLER_SPAN}-01`, `00-${TRACE_ID}-${CALLER_SPAN}-01-` + 'x'.repeat(10_000)]) {
    const res = await test.app.inject({ method: 'POST', url: '/api/v1/chat/completions', headers: { ...test.auth, traceparent, tracestate: 'a=b,'.repeat(2000) }, payload: chatBody() })
    t.equal(res.statusCode, 200, 'a bad traceparent never fails the request')
  }
  await test.app.close()
  await collector.waitFor(spans => spans.filter(s => s.name === 'POST /api/v1/chat/completions').length === 3)
  t.notOk(collector.spans.some(s => s.traceId === TRACE_ID), 'nothing of the unsampled trace')
  t.ok(collector.spans.filter(s => s.name.startsWith('POST')).every(s => s.parentSpanId === ''), 'the others are roots')
})

t.test('a refused request is traced too: the model span ends with its error type', async t => {
  const collector = await otlpCollector(t)
  const test = await buildTestApp(t, { env: { OTEL_EXPORTER_OTLP_ENDPOINT: collector.url } })
  t.equal((await test.app.inject({ method: 'POST', url: '/api/v1/chat/completions', headers: test.auth, payload: chatBody({ n: 2 }) })).statusCode, 400)
  t.equal((await test.app.inject({ method: 'POST', url: '/api/v1/chat/completions', headers: { authorization: 'Bearer sk-chatd-wrongwrongwrongwrongwrongwrong12' }, payload: chatBody() })).statusCode, 401)
  await test.app.close()
  await collector.waitFor(spans => spans.filter(s => s.name === 'auth').length === 2)
  t.equal(byName(collector.spans, 'chat scripted').attributes['error.type'], 'invalid_parameter')
  const failedAuth = collector.spans.find(s => s.name === 'auth' && s.statusCode === 2)
  t.equal(failedAuth?.attributes['error.type'], 'invalid_api_key')
})

t.test('web searches are spans of the model span: googleSearchStatus\'s search, and each hosted search round with its backend calls', async t => {
  const searxng = await loopbackServer(t, (_req, res) => {
    res.writeHead(200, { 'content-type': 'application/json' })
    res.end(JSON.stringify({ results: [{ title: 'Otters', url: 'https://example.org/otters', content: 'Otters live in rivers.' }] }))
  })
  const collector = await otlpCollector(t)
  const env = { OTEL_EXPORTER_OTLP_ENDPOINT: collector.url, SEARCH_PROVIDER: 'searxng', SEARXNG_URL: searxng.url, SEARCH_CACHE_TTL_MS: '0' }
  const chat = await buildTestApp(t, { env })
  t.equal((await chat.app.inject({ method: 'POST', url: '/api/v1/chat/completions', headers: chat.auth, payload: chatBody({ googleSearchStatus: true }) })).statusCode, 200)
  await chat.app.close()
  await collector.waitFor(spans => spans.some(s => s.name === 'search'))
  t.equal(byName(collector.spans, 'search').parentSpanId, byName(collector.spans, 'chat scripted').spanId)

  const rounds: GenerateEvent[][] = [
    [{ type: 'delta', toolCalls: [{ index: 0, id: 'call_s', name: 'web_search' }] }, { type: 'delta', toolCalls: [{ index: 0, arguments: '{"query":"otters"}' }] }, { type: 'finish', reason: 'tool_calls', usage: usage(20, 6) }],
    [{ type: 'delta', content: 'In rivers [1].' }, { type: 'finish', reason: 'stop', usage: usage(40, 7) }],
  ]
  const responses = await buildResponsesApp(t, { backends: [new ScriptBackend(rounds)], env })
  const res = await responses.app.inject({ method: 'POST', url: '/api/v1/responses', headers: responses.auth, payload: { model: 'scripted', input: 'Otters?', tools: [{ type: 'web_search' }] } })
  t.equal(res.statusCode, 200, res.body)
  await responses.app.close()
  await collector.waitFor(spans => spans.some(s => s.name === 'search round'))
  const round = byName(collector.spans, 'search round')
  const model = collector.spans.find(s => s.name === 'chat scripted' && s.traceId === round.traceId)!
  t.equal(round.parentSpanId, model.spanId, 'the round is the model span\'s child')
  t.equal(collector.spans.filter(s => s.name === 'upstream scripted' && s.parentSpanId === model.spanId).length, 2, 'one backend call per round')
  t.equal(model.attributes['gen_ai.usage.input_tokens'], 60, 'the rounds\' usage summed')
})

t.test('with tracing off, the OpenTelemetry SDK is never loaded', async t => {
  const dir = t.testdir()
  const source = `
    import { registerHooks } from 'node:module'
    const loaded = new Set()
    registerHooks({ resolve (specifier, context, next) { if (specifier.startsWith('@opentelemetry/')) loaded.add(specifier); return next(specifier, context) } })
    const { startServer } = await import(${JSON.stringify(join(REPO_ROOT, 'src/server.ts'))})
    const { loadConfig } = await import(${JSON.stringify(join(REPO_ROOT, 'src/config.ts'))})
    const { writeFileSync } = await import('node:fs')
    writeFileSync(${JSON.stringify(join(dir, 'models.json'))}, JSON.stringify({ models: [{ id: 'relay', backend: 'openai', baseUrl: 'http://127.0.0.1:2/v1', upstreamModel: 'm' }] }))
    const app = await startServer(loadConfig({ PORT: '0', LOG_LEVEL: 'silent', DATABASE_URL: 'sqlite://${join(dir, 'chatd.db')}', MODELS_FILE: ${JSON.stringify(join(dir, 'models.json'))}, CHATD_ADMIN_KEY: 'sk-chatd-0123456789abcdefghijABCDEFGHIJ01', ...(process.env.TRACES_TO ? { OTEL_EXPORTER_OTLP_ENDPOINT: process.env.TRACES_TO } : {}) }), { print: () => {}, logger: false })
    const res = await app.inject({ method: 'POST', url: '/api/v1/chat/completions', headers: { authorization: 'Bearer sk-chatd-0123456789abcdefghijABCDEFGHIJ01' }, payload: { model: 'relay', messages: [{ role: 'user', content: 'hi' }] } })
    await app.close()
    console.log(JSON.stringify({ status: res.statusCode, loaded: [...loaded] }))
  `
  const loaded = async (tracesTo?: string): Promise<string[]> => {
    const run = await runModuleSource(source, { cwd: REPO_ROOT, env: { ...process.env, TRACES_TO: tracesTo ?? '' }, killAfterMs: 60_000 })
    t.equal(run.code, 0, run.stderr)
    const result = JSON.parse(run.stdout.trim().split('\n').at(-1)!)
    t.equal(result.status, 502, 'the request ran (its upstream is unreachable)')
    return result.loaded.filter((s: string) => s !== '@opentelemetry/api')
  }
  t.same(await loaded(), [], 'off: nothing but the API package (which prom-client loads anyway)')
  // The same script with tracing on does load it: the hook above sees the SDK's imports.
  const collector = await otlpCollector(t)
  t.ok((await loaded(collector.url)).includes('@opentelemetry/sdk-trace'), 'on: the SDK is loaded')
})

t.test('the OTEL_* settings: the traces URL, the exporter\'s headers, and refusals that never echo a header\'s value', async t => {
  const { loadConfig } = await import('../../src/config.ts')
  t.equal(loadConfig({}).tracing, undefined, 'no endpoint: no tracing')
  t.equal(loadConfig({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://collector:4318/' }).tracing?.url, 'http://collector:4318/v1/traces')
  t.equal(loadConfig({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://collector:4318', OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: 'https://traces.example.com/otlp' }).tracing?.url, 'https://traces.example.com/otlp', 'the traces endpoint wins, as it is')
  const tracing = loadConfig({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://c:4318', OTEL_EXPORTER_OTLP_HEADERS: 'Authorization=Bearer%20s3cret, x-team=ops', OTEL_TRACES_SAMPLER_ARG: '0.25' }).tracing
  t.same(tracing?.headers, { authorization: 'Bearer s3cret', 'x-team': 'ops' })
  t.equal(tracing?.sampleRatio, 0.25)
  t.equal(tracing?.captureContent, false, 'prompts stay out by default')
  for (const headers of ['novalue', 'bad name=x', 'x=%E0%A4%A', 'x=line%0Abreak']) {
    try {
      loadConfig({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://c:4318', OTEL_EXPORTER_OTLP_HEADERS: headers })
      t.fail(`refused: ${headers}`)
    } catch (err) {
      t.match((err as Error).message, /OTEL_EXPORTER_OTLP_HEADERS: must be name=value pairs/)
      t.notMatch((err as Error).message, /novalue|bad name|E0|line/, 'the value is not echoed')
    }
  }
  t.throws(() => loadConfig({ OTEL_EXPORTER_OTLP_PROTOCOL: 'grpc' }), /OTEL_EXPORTER_OTLP_PROTOCOL: must be one of http\/protobuf/)
  t.throws(() => loadConfig({ OTEL_TRACES_SAMPLER_ARG: '2' }), /OTEL_TRACES_SAMPLER_ARG/)
  t.throws(() => loadConfig({ OTEL_EXPORTER_OTLP_ENDPOINT: 'collector:4318' }), /OTEL_EXPORTER_OTLP_ENDPOINT: must be an http:\/\/ or https:\/\/ URL/)
})
