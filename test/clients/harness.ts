// What the client tests share: a scripted tool-capable upstream on loopback (a call of
// get_weather first, a text answer once the conversation carries the tool's result; streamed
// or whole, as asked), chatd relaying to it over real HTTP, and a capture server that answers
// the same way so a test can record the exact body a client sends without chatd in between.
import type http from 'node:http'
import type { AddressInfo } from 'node:net'
import type { Test } from 'tap'
import type { ReasoningMode } from '../../src/engine/models-file.ts'
import { UpstreamBackend } from '../../src/engine/upstream/backend.ts'
import { buildTestApp, type TestApp } from '../helpers/app.ts'
import { startStoriesServer } from '../helpers/stories-server.ts'
import { chunk, loopbackServer, sseData, sseHead, type Handler, type Loopback } from '../upstream/loopback.ts'

export const MODEL = 'relay'
const CHAT = '/api/v1/chat/completions'
export const ANSWER = 'It is 3 degrees in Oslo.'

export interface Script {
  /** The arguments of each call, as JSON text (one call per entry). */
  calls: string[]
  /** How the streamed arguments are cut: the lengths of the pieces before the rest (default: two pieces). */
  cuts?: number[]
  /** Thinking the upstream sends before its calls, as `reasoning_content` (as vLLM and DeepSeek do). */
  reasoning?: string
  /** The tool it calls (default get_weather). */
  tool?: string
  /** Its answer once the conversation carries a tool result (default ANSWER). */
  answer?: string
}

const defaultScript: Script = { calls: ['{"city":"Oslo"}'] }

function pieces (text: string, cuts: number[] | undefined): string[] {
  const at = cuts ?? [Math.floor(text.length / 2)]
  const out: string[] = []
  let start = 0
  for (const cut of at) {
    out.push(text.slice(start, start + cut))
    start += cut
  }
  out.push(text.slice(start))
  return out.filter(p => p !== '')
}

const usage = { prompt_tokens: 20, completion_tokens: 9, total_tokens: 29 }

function reply (res: http.ServerResponse, stream: boolean, message: { content: string | null; reasoning?: string; tool_calls?: Array<{ id: string; name: string; arguments: string }> }, cuts?: number[]): void {
  const calls = message.tool_calls ?? []
  const finish = calls.length > 0 ? 'tool_calls' : 'stop'
  if (!stream) {
    res.writeHead(200, { 'content-type': 'application/json' })
    res.end(JSON.stringify({
      id: 'chatcmpl-upstream',
      object: 'chat.completion',
      created: 1,
      model: 'm',
      choices: [{
        index: 0,
        message: { role: 'assistant', content: message.content, ...(message.reasoning ? { reasoning_content: message.reasoning } : {}), ...(calls.length > 0 ? { tool_calls: calls.map(c => ({ id: c.id, type: 'function', function: { name: c.name, arguments: c.arguments } })) } : {}) },
        finish_reason: finish,
      }],
      usage,
    }))
    return
  }
  sseHead(res)
  sseData(res, chunk({ role: 'assistant', content: message.content === null ? null : '' }))
  if (message.reasoning) sseData(res, chunk({ reasoning_content: message.reasoning }))
  if (message.content) sseData(res, chunk({ content: message.content }))
  calls.forEach((c, index) => {
    // As OpenAI streams a call: id and name first, then the arguments in pieces.
    sseData(res, chunk({ tool_calls: [{ index, id: c.id, type: 'function', function: { name: c.name, arguments: '' } }] }))
    for (const piece of pieces(c.arguments, cuts)) sseData(res, chunk({ tool_calls: [{ index, function: { arguments: piece } }] }))
  })
  sseData(res, chunk({}, finish))
  sseData(res, { id: 'chatcmpl-upstream', object: 'chat.completion.chunk', created: 1, model: 'm', choices: [], usage })
  sseData(res, '[DONE]')
  res.end()
}

/** Calls the script's tool (get_weather) until the conversation carries a tool result, then answers (ANSWER). */
export function callThenAnswer (script: Script = defaultScript): Handler {
  return (_req, res, recorded) => {
    const body = JSON.parse(recorded.body) as { stream?: boolean; messages: Array<{ role: string }> }
    const stream = body.stream === true
    if (body.messages.some(m => m.role === 'tool')) return reply(res, stream, { content: script.answer ?? ANSWER })
    reply(res, stream, { content: null, reasoning: script.reasoning, tool_calls: script.calls.map((args, i) => ({ id: `call_up${i + 1}`, name: script.tool ?? 'get_weather', arguments: args })) }, script.cuts)
  }
}

export interface Relay extends TestApp {
  /** chatd's API root for a client: http://127.0.0.1:<port>/api/v1 */
  baseURL: string
  /** The upstream behind chatd; its `requests` are what chatd sent on. */
  upstream: Loopback
}

/** chatd listening on loopback with one model, MODEL, relayed to a scripted upstream. */
export async function relayThroughChatd (t: Test, handler: Handler = callThenAnswer(), opts: { reasoning?: ReasoningMode } = {}): Promise<Relay> {
  const upstream = await loopbackServer(t, handler)
  const backend = new UpstreamBackend({ id: MODEL, baseUrl: `${upstream.url}/v1`, upstreamModel: 'upstream-model' })
  t.teardown(() => backend.close())
  const test = await buildTestApp(t, { backends: [{ backend, reasoning: opts.reasoning }] })
  await test.app.listen({ port: 0, host: '127.0.0.1' })
  const { port } = test.app.server.address() as AddressInfo
  return { ...test, upstream, baseURL: `http://127.0.0.1:${port}/api/v1` }
}

/** A server that answers as the scripted upstream does and records each body a client sends it; `baseURL` ends in /v1. */
export async function captureServer (t: Test, handler: Handler = callThenAnswer()): Promise<{ baseURL: string; bodies: () => Array<Record<string, unknown>> }> {
  const server = await loopbackServer(t, handler)
  return { baseURL: `${server.url}/v1`, bodies: () => server.requests.map(r => JSON.parse(r.body) as Record<string, unknown>) }
}

/** The bodies chatd sent on to the upstream, parsed. */
export function sentBodies (upstream: Loopback): Array<Record<string, any>> {
  return upstream.requests.map(r => JSON.parse(r.body) as Record<string, any>)
}

/**
 * What the local engine may answer a client's body: 200, or one of the refusals docs/api.md
 * describes for it, never one of a field the client sent: stories260k's context is 512 tokens
 * (a tools block may not fit), and a required or named tool choice together with a JSON
 * response_format (both would constrain the same answer).
 */
function answeredOrDocumented (res: { statusCode: number; json: () => any }): boolean {
  if (res.statusCode === 200) return true
  const error = res.json().error
  return error?.code === 'context_length_exceeded' || (error?.param === 'tool_choice' && /cannot also follow a JSON response_format/.test(error.message))
}

/**
 * Sends each body a client sent, unchanged, to chatd: relayed to the scripted upstream it must get
 * 200; on stories260k (a server started here with `key`) 200 or a documented refusal.
 */
export async function replayCaptured (t: Test, bodies: Array<Record<string, unknown>>, key: string): Promise<void> {
  const relay = await relayThroughChatd(t)
  const local = await startStoriesServer(t, { modelId: 'stories260k', key })
  for (const body of bodies) {
    const res = await relay.app.inject({ method: 'POST', url: CHAT, headers: relay.auth, payload: { ...body, model: MODEL } })
    t.equal(res.statusCode, 200, `relayed: ${JSON.stringify(body).slice(0, 160)}: ${res.body.slice(0, 300)}`)
    const onLocal = await local.app.inject({ method: 'POST', url: CHAT, headers: { authorization: `Bearer ${key}` }, payload: { ...body, model: 'stories260k', max_tokens: 8 } })
    t.ok(answeredOrDocumented(onLocal), `stories260k: ${JSON.stringify(body).slice(0, 160)}: ${onLocal.body.slice(0, 300)}`)
  }
}
