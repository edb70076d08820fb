// The serving families under vLLM's names (src/api/metrics/serving.ts) and the
// GenAI histograms (gen-ai.ts), as /metrics shows them after requests through
// each door: every series labelled model_name, the token counters equal to the
// usage the clients got, the finish reasons, refusals by reason, and never a
// label value a client chose.

import t from 'tap'
import { buildTestApp, chatBody } from '../helpers/app.ts'
import { metricSamples } from '../helpers/load/metrics-scrape.ts'
import { ScriptedBackend } from '../helpers/scripted-backend.ts'
import type { FastifyInstance } from 'fastify'
import { ApiError } from '../../src/errors.ts'

async function scrape (app: FastifyInstance): Promise<string> {
  const res = await app.inject({ url: '/metrics' })
  return res.body
}

/** The value of `name` whose labels include `labels`, summed; 0 when none. */
function value (text: string, name: string, labels: Record<string, string> = {}): number {
  return metricSamples(text, name)
    .filter(s => Object.entries(labels).every(([k, v]) => s.labels[k] === v))
    .reduce((n, s) => n + s.value, 0)
}

t.test('a request through each door is counted once, under vLLM\'s names, with model_name', async t => {
  const test = await buildTestApp(t)
  const usage = { prompt: 0, completion: 0 }
  const chat = await test.app.inject({ method: 'POST', url: '/api/v1/chat/completions', headers: test.auth, payload: chatBody() })
  t.equal(chat.statusCode, 200)
  usage.prompt += chat.json().usage.prompt_tokens
  usage.completion += chat.json().usage.completion_tokens
  const responses = await test.app.inject({ method: 'POST', url: '/api/v1/responses', headers: test.auth, payload: { model: 'scripted', input: 'Tell me a story' } })
  t.equal(responses.statusCode, 200)
  usage.prompt += responses.json().usage.input_tokens
  usage.completion += responses.json().usage.output_tokens
  const messages = await test.app.inject({ method: 'POST', url: '/api/v1/messages', headers: test.auth, payload: { model: 'scripted', max_tokens: 64, messages: [{ role: 'user', content: 'Tell me a story' }] } })
  t.equal(messages.statusCode, 200)
  usage.prompt += messages.json().usage.input_tokens
  usage.completion += messages.json().usage.output_tokens

  const text = await scrape(test.app)
  const m = { model_name: 'scripted' }
  t.equal(value(text, 'vllm:request_success_total', { ...m, finished_reason: 'stop' }), 3, 'three requests ended with stop')
  t.equal(value(text, 'vllm:prompt_tokens_total', m), usage.prompt, 'prompt tokens as the clients were told')
  t.equal(value(text, 'vllm:generation_tokens_total', m), usage.completion, 'generated tokens as the clients were told')
  t.equal(value(text, 'vllm:e2e_request_latency_seconds_count', m), 3)
  t.equal(value(text, 'vllm:time_to_first_token_seconds_count', m), 3)
  // Four words each: three gaps between outputs per request.
  t.equal(value(text, 'vllm:inter_token_latency_seconds_count', m), 9)
  t.equal(value(text, 'vllm:request_time_per_output_token_seconds_count', m), 3)
  t.equal(value(text, 'vllm:request_prompt_tokens_sum', m), usage.prompt)
  t.equal(value(text, 'vllm:request_generation_tokens_count', m), 3)
  t.equal(value(text, 'vllm:num_requests_running', m), 0, 'nothing runs once the replies are out')
  t.equal(value(text, 'vllm:num_requests_waiting', m), 0)
  t.equal(value(text, 'gen_ai_server_request_duration_seconds_count', { ...m, gen_ai_operation_name: 'chat', gen_ai_request_model: 'scripted' }), 3)
  t.equal(value(text, 'gen_ai_server_time_to_first_token_seconds_count', m), 3)
  t.equal(value(text, 'gen_ai_server_time_per_output_token_seconds_count', m), 3)
  t.match(text, /# TYPE vllm:time_to_first_token_seconds histogram/)
  t.match(text, /vllm:time_to_first_token_seconds_bucket\{le="0\.001",model_name="scripted"\}/, 'vLLM\'s first bucket')
  t.match(text, /vllm:e2e_request_latency_seconds_bucket\{le="7680",model_name="scripted"\}/, 'vLLM\'s last request-latency bucket')
  t.match(text, /gen_ai_server_time_per_output_token_seconds_bucket\{le="2\.5",/, 'the conventions\' last time-per-token bucket')
  // The local engine's families are absent for a backend without one.
  t.equal(metricSamples(text, 'vllm:kv_cache_usage_perc').length, 0)
  // The older chatd_* families still count too.
  t.equal(value(text, 'chatd_completions_total', { model: 'scripted', finish_reason: 'stop' }), 3)
})

t.test('refusals are counted by reason for configured models, never under a model name a client made up', async t => {
  const gate = Promise.withResolvers<void>()
  const backend = new ScriptedBackend({ firstGate: gate.promise })
  const long = new ScriptedBackend({ id: 'long', refuse: new ApiError('context_length_exceeded', 'too long', { param: 'messages' }) })
  const test = await buildTestApp(t, { backends: [backend, long], env: { QUEUE_SIZE: '1' } })
  const first = test.app.inject({ method: 'POST', url: '/api/v1/chat/completions', headers: test.auth, payload: chatBody() })
  await backend.whenRunning(1)
  const overloaded = await test.app.inject({ method: 'POST', url: '/api/v1/chat/completions', headers: test.auth, payload: chatBody() })
  t.equal(overloaded.statusCode, 503)
  gate.resolve()
  t.equal((await first).statusCode, 200)
  const bad = await test.app.inject({ method: 'POST', url: '/api/v1/chat/completions', headers: test.auth, payload: chatBody({ n: 3 }) })
  t.equal(bad.statusCode, 400)
  const hostile = 'x'.repeat(200) + '"}\nvllm:evil{a="1'
  const unknown = await test.app.inject({ method: 'POST', url: '/api/v1/chat/completions', headers: test.auth, payload: chatBody({ model: hostile }) })
  t.equal(unknown.statusCode, 404)

  const tooLong = await test.app.inject({ method: 'POST', url: '/api/v1/chat/completions', headers: test.auth, payload: chatBody({ model: 'long' }) })
  t.equal(tooLong.statusCode, 400)

  const text = await scrape(test.app)
  t.equal(value(text, 'vllm:admission_rejections_total', { model_name: 'long', reason: 'context_length_exceeded' }), 1, 'the model\'s own refusal before any output')
  t.equal(value(text, 'vllm:request_success_total', { model_name: 'long' }), 0, 'which is no finished request')
  t.equal(value(text, 'vllm:admission_rejections_total', { model_name: 'scripted', reason: 'server_overloaded' }), 1, 'a full queue')
  t.equal(value(text, 'vllm:admission_rejections_total', { model_name: 'scripted', reason: 'invalid_parameter' }), 1, 'a refused parameter')
  t.equal(metricSamples(text, 'vllm:admission_rejections_total').length, 3, 'nothing for the unknown model')
  t.notMatch(text, 'xxxxxxxxxx', 'the client\'s model name is in no label')
  t.equal(value(text, 'gen_ai_server_request_duration_seconds_count', { model_name: 'scripted', error_type: 'server_overloaded' }), 1, 'a refusal\'s duration carries its error type')
})

t.test('a client that leaves mid-stream is an abort; a generation that fails is an error', async t => {
  const failing = new ScriptedBackend({ id: 'failing', failAfter: { deltas: 2, error: new Error('boom') } })
  const slow = new ScriptedBackend({ id: 'slow', delayMs: 20, words: Array.from({ length: 500 }, () => ' word') })
  const test = await buildTestApp(t, { backends: [failing, slow] })
  const failed = await test.app.inject({ method: 'POST', url: '/api/v1/chat/completions', headers: test.auth, payload: chatBody({ model: 'failing' }) })
  t.equal(failed.statusCode, 500)

  await test.app.listen({ port: 0, host: '127.0.0.1' })
  const address = test.app.server.address() as { port: number }
  const controller = new AbortController()
  const res = await fetch(`http://127.0.0.1:${address.port}/api/v1/chat/completions`, {
    method: 'POST',
    headers: { ...test.auth, 'content-type': 'application/json' },
    body: JSON.stringify(chatBody({ model: 'slow', stream: true })),
    signal: controller.signal,
  })
  const reader = res.body!.getReader()
  await reader.read()
  controller.abort()
  const deadline = Date.now() + 10_000
  let text = await scrape(test.app)
  while (value(text, 'vllm:request_success_total', { model_name: 'slow' }) === 0 && Date.now() < deadline) {
    await new Promise(resolve => setTimeout(resolve, 20))
    text = await scrape(test.app)
  }
  t.equal(value(text, 'vllm:request_success_total', { model_name: 'slow', finished_reason: 'abort' }), 1, 'the client left')
  t.equal(value(text, 'vllm:request_success_total', { model_name: 'failing', finished_reason: 'error' }), 1, 'the generation failed')
  t.equal(value(text, 'gen_ai_server_request_duration_seconds_count', { model_name: 'failing', error_type: 'internal_error' }), 1)
  t.equal(value(text, 'vllm:num_requests_running', { model_name: 'slow' }), 0)
})

t.test('METRICS_FAMILY_PREFIX=chatd: keeps vLLM\'s suffixes under chatd\'s prefix', async t => {
  const { Metrics } = await import('../../src/api/metrics/metrics.ts')
  const metrics = new Metrics({ familyPrefix: 'chatd:' })
  metrics.serving.requestSuccess.inc({ model_name: 'm', finished_reason: 'stop' })
  const text = await metrics.registry.metrics()
  t.match(text, /^chatd:request_success_total\{model_name="m",finished_reason="stop"\} 1$/m)
  t.notMatch(text, /vllm:/)
})
