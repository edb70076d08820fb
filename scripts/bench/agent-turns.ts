// The captured agent turns the benchmarks replay: the bodies the Codex CLI
// (0.169.0, Responses API: test/fixtures/responses/codex-turn1.json) and Claude
// Code (2.1.332, Messages API: test/fixtures/claude-code-first-turn.json)
// really send, streamed to a chatd server, timed to the first streamed delta.
// npm run bench:agent-turn measures them on the CPU; npm run bench -- --device
// webgpu on the GPU.
import fs from 'node:fs'
import path from 'node:path'
import Anthropic from '@anthropic-ai/sdk'
import { BENCH_MODEL_ID, type ChatdServer } from './chatd-server.ts'

const ROOT = path.resolve(path.dirname(new URL(import.meta.url).pathname), '../..')
const fixture = (name: string): Record<string, unknown> => JSON.parse(fs.readFileSync(path.join(ROOT, 'test/fixtures', name), 'utf8'))

/** `ttftMs`: to the first streamed delta; `endMs`: to the stream's end (the reply's 8 tokens and its usage). */
export interface Turn { ttftMs: number; endMs: number; inputTokens: number; cachedTokens: number }
type TextPart = { text: string }
/** One streamed turn of an agent: `first` replaces the instructions' first character, `user` the user's words. */
export type Agent = (server: ChatdServer, first: string, user: string) => Promise<Turn>

export const codex: Agent = async (server, first, user) => {
  const body = fixture('responses/codex-turn1.json') as { input: Array<{ role?: string; content: TextPart[] }> }
  const developer = body.input.find(i => i.role === 'developer')!
  developer.content[0].text = first + developer.content[0].text.slice(1)
  const lastUser = body.input.findLast(i => i.role === 'user')!
  lastUser.content = [{ ...lastUser.content[0], text: user }]
  const started = performance.now()
  let ttftMs = NaN
  let usage: { input_tokens: number; input_tokens_details?: { cached_tokens?: number } } | undefined
  const stream = await server.client.responses.create({ ...body, model: BENCH_MODEL_ID, max_output_tokens: 8, stream: true } as never) as unknown as AsyncIterable<{ type: string; response?: { usage?: typeof usage } }>
  for await (const event of stream) {
    if (Number.isNaN(ttftMs) && event.type.endsWith('.delta')) ttftMs = performance.now() - started
    if (event.response?.usage) usage = event.response.usage
  }
  return { ttftMs, endMs: performance.now() - started, inputTokens: usage?.input_tokens ?? NaN, cachedTokens: usage?.input_tokens_details?.cached_tokens ?? 0 }
}

export const claudeCode: Agent = async (server, first, user) => {
  const body = fixture('claude-code-first-turn.json') as { system: TextPart[]; messages: Array<{ role: string; content: TextPart[] }> }
  // The system's first block is a short billing header; the instructions start in the second.
  const instructions = body.system.find(b => b.text.length > 1000) ?? body.system[0]
  instructions.text = first + instructions.text.slice(1)
  const userTurn = body.messages.find(m => m.role === 'user')!
  userTurn.content[userTurn.content.length - 1] = { ...userTurn.content.at(-1)!, text: user }
  const anthropic = new Anthropic({ apiKey: server.client.apiKey, baseURL: server.client.baseURL.replace(/\/v1\/?$/, ''), maxRetries: 0, timeout: 900_000 })
  const started = performance.now()
  let ttftMs = NaN
  let usage: Anthropic.MessageDeltaUsage | undefined
  let startUsage: Anthropic.Usage | undefined
  const stream = await anthropic.messages.create({ ...body, model: BENCH_MODEL_ID, max_tokens: 8, stream: true } as never) as unknown as AsyncIterable<Anthropic.RawMessageStreamEvent>
  for await (const event of stream) {
    if (Number.isNaN(ttftMs) && event.type === 'content_block_delta') ttftMs = performance.now() - started
    if (event.type === 'message_start') startUsage = event.message.usage
    if (event.type === 'message_delta') usage = event.usage
  }
  const endMs = performance.now() - started
  const cached = usage?.cache_read_input_tokens ?? startUsage?.cache_read_input_tokens ?? 0
  // Anthropic's input_tokens leaves out what was read from the cache.
  return { ttftMs, endMs, inputTokens: (usage?.input_tokens ?? startUsage?.input_tokens ?? NaN) + cached, cachedTokens: cached }
}

/** The agents by the names the benchmarks take. */
export const AGENTS: Record<string, Agent> = { codex, 'claude-code': claudeCode }
