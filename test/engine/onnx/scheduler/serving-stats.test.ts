// What the real local engine (stories260k, in its worker thread) tells the
// operator: its prefix cache look-ups and hits in tokens, its steps, each
// request's queue, prompt and decode times (histograms, spans, the response's
// timings), and while a request runs, its running count and its share of the
// KV cache budget.

import t from 'tap'
import { startStoriesServer } from '../../../helpers/stories-server.ts'
import { endlessModelDir } from '../../../helpers/models.ts'
import { metricSamples } from '../../../helpers/load/metrics-scrape.ts'
import { otlpCollector } from '../../../helpers/otlp-collector.ts'

const KEY = `sk-chatd-${'servingStats'.repeat(2)}abcdefgh`
const PROMPT = 'Once upon a time there was a little dog named Max who lived in a small house near the woods.'

function value (text: string, name: string, labels: Record<string, string> = {}): number {
  return metricSamples(text, name).filter(s => Object.entries(labels).every(([k, v]) => s.labels[k] === v)).reduce((n, s) => n + s.value, 0)
}

t.test('prefix cache hits, steps, queue/prefill/decode: in /metrics, in spans and in the response\'s timings', async t => {
  const collector = await otlpCollector(t)
  const { url, app } = await startStoriesServer(t, { modelId: 'stories', key: KEY, threads: 1, env: { OTEL_EXPORTER_OTLP_ENDPOINT: collector.url }, closeOnTeardown: false })
  const ask = async () => {
    const res = await fetch(`${url}/api/v1/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${KEY}`, 'content-type': 'application/json', 'x-chatd-timings': '1' },
      body: JSON.stringify({ model: 'stories', messages: [{ role: 'user', content: PROMPT }], temperature: 0, max_tokens: 16 }),
    })
    t.equal(res.status, 200)
    return { body: await res.json() as { usage: { prompt_tokens: number; completion_tokens: number; prompt_tokens_details: { cached_tokens: number } }; timings: Record<string, number> }, serverTiming: res.headers.get('server-timing') }
  }
  const first = await ask()
  const second = await ask()
  const cached = second.body.usage.prompt_tokens_details.cached_tokens
  t.ok(cached > 0, 'the second request reused the first one\'s prompt')

  const text = await (await fetch(`${url}/metrics`)).text()
  const m = { model_name: 'stories' }
  t.equal(value(text, 'vllm:prefix_cache_queries_total', m), first.body.usage.prompt_tokens + second.body.usage.prompt_tokens, 'both prompts were looked up, in tokens')
  t.equal(value(text, 'vllm:prefix_cache_hits_total', m), cached, 'the hits are the cached tokens')
  for (const name of ['vllm:request_queue_time_seconds_count', 'vllm:request_prefill_time_seconds_count', 'vllm:request_decode_time_seconds_count', 'vllm:request_inference_time_seconds_count']) {
    t.equal(value(text, name, m), 2, name)
  }
  const steps = value(text, 'chatd_engine_steps_total', m)
  t.ok(steps >= 2 * 15, `a step per generated token at least (${steps})`)
  t.equal(value(text, 'vllm:iteration_tokens_total_count', m), steps, 'every step observed in the histogram')
  t.equal(value(text, 'vllm:iteration_tokens_total_sum', m), value(text, 'chatd_engine_step_tokens_total', m), 'with its tokens')
  // Prompt tokens computed, and one token per decoding row and step.
  const computed = first.body.usage.prompt_tokens + second.body.usage.prompt_tokens - cached
  t.ok(value(text, 'chatd_engine_step_tokens_total', { ...m, kind: 'prefill' }) >= computed, 'the computed prompt tokens went through prefill steps')
  t.ok(value(text, 'chatd_prefix_cache_usage_perc', m) > 0, 'the kept caches hold part of the budget')
  t.equal(value(text, 'chatd_engine_replayed_tokens_total', m), 0, 'no capture step: nothing replayed')

  // The response's own timings: the engine's queue and prompt times.
  t.match(second.body.timings, { prompt_n: second.body.usage.prompt_tokens, cache_n: cached, predicted_n: second.body.usage.completion_tokens })
  t.equal(typeof second.body.timings.queue_ms, 'number')
  t.equal(typeof second.body.timings.prompt_ms, 'number')
  t.match(second.serverTiming, /^queue;dur=[\d.]+, prompt;dur=[\d.]+, ttft;dur=/)

  await app.close()
  await collector.waitFor(spans => spans.filter(s => s.name === 'decode').length === 2)
  const model = collector.spans.find(s => s.name === 'chat stories')!
  const child = (name: string) => collector.spans.find(s => s.name === name && s.traceId === model.traceId)!
  const [queue, prefill, decode] = [child('queue'), child('prefill'), child('decode')]
  for (const span of [queue, prefill, decode]) t.equal(span.parentSpanId, model.spanId, `${span.name} is the model span's child`)
  t.ok(queue.endMs <= prefill.startMs + 1 && prefill.endMs <= decode.startMs + 1, 'queue, then prefill, then decode')
  t.ok(decode.startMs >= model.startMs && decode.endMs <= model.endMs + 1, 'inside the model span')
  t.equal(decode.attributes['gen_ai.usage.output_tokens'], first.body.usage.completion_tokens)
  t.notOk(collector.spans.some(s => s.name.startsWith('upstream')), 'no upstream span for a local model')
})

t.test('while a request runs: one running, none waiting, a share of the KV cache budget held', async t => {
  const { url } = await startStoriesServer(t, { modelId: 'endless', key: KEY, threads: 1, modelDir: endlessModelDir() })
  const controller = new AbortController()
  const res = await fetch(`${url}/api/v1/chat/completions`, {
    method: 'POST',
    headers: { authorization: `Bearer ${KEY}`, 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'endless', messages: [{ role: 'user', content: 'Go on forever' }], max_tokens: 20000, stream: true }),
    signal: controller.signal,
  })
  const reader = res.body!.getReader()
  await reader.read()
  const m = { model_name: 'endless' }
  // The engine reports at most every 250 ms while busy: wait for a report made while it runs.
  const deadline = Date.now() + 30_000
  let text = ''
  while (Date.now() < deadline) {
    text = await (await fetch(`${url}/metrics`)).text()
    if (value(text, 'vllm:num_requests_running', m) === 1) break
    await new Promise(resolve => setTimeout(resolve, 20))
  }
  t.equal(value(text, 'vllm:num_requests_running', m), 1)
  t.equal(value(text, 'vllm:num_requests_waiting', m), 0)
  t.ok(value(text, 'vllm:kv_cache_usage_perc', m) > 0, `the running sequence holds its reservation (${value(text, 'vllm:kv_cache_usage_perc', m)})`)
  controller.abort()
  const idleBy = Date.now() + 30_000
  while (Date.now() < idleBy) {
    text = await (await fetch(`${url}/metrics`)).text()
    if (value(text, 'vllm:num_requests_running', m) === 0 && value(text, 'vllm:request_success_total', { ...m, finished_reason: 'abort' }) === 1) break
    await new Promise(resolve => setTimeout(resolve, 20))
  }
  t.equal(value(text, 'vllm:num_requests_running', m), 0, 'back to none')
  t.equal(value(text, 'vllm:kv_cache_usage_perc', m), 0, 'and the budget is free again')
  t.equal(value(text, 'vllm:request_success_total', { ...m, finished_reason: 'abort' }), 1, 'counted as an abort')
})
