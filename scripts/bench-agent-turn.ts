// What one agent turn costs on the local model: the bodies the Codex CLI
// (0.169.0, Responses API: test/fixtures/responses/codex-turn1.json) and Claude
// Code (2.1.332, Messages API: test/fixtures/claude-code-first-turn.json)
// really send, streamed to `chatd serve` on the benchmarks' model (seeded
// random weights in the exact DeepSeek-R1-Distill-Qwen-1.5B shape, Qwen
// tokenizer). Reports the prompt's tokens, and the time to the first streamed
// delta with nothing cached (each such round changes the instructions' first
// character, so no prefix matches) and with the instructions cached (the same
// instructions, a new user message: what the next turn of a session, or a new
// session of the same account, finds).
//
//   node scripts/bench-agent-turn.ts [--agent codex|claude-code|both] [--rounds 3] [--dtype q4]
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { parseArgs } from 'node:util'
import Anthropic from '@anthropic-ai/sdk'
import { benchModelDir } from './bench-model.ts'
import { BENCH_MODEL_ID, startChatdServer, type ChatdServer } from './bench/chatd-server.ts'

const ROOT = path.resolve(path.dirname(new URL(import.meta.url).pathname), '..')
const { values } = parseArgs({ options: { agent: { type: 'string', default: 'both' }, rounds: { type: 'string', default: '3' }, dtype: { type: 'string', default: 'q4' } } })
const rounds = Number(values.rounds)
const OUT = path.join(ROOT, 'bench-out', 'agent-turn')
const fixture = (name: string): Record<string, unknown> => JSON.parse(fs.readFileSync(path.join(ROOT, 'test/fixtures', name), 'utf8'))

interface Turn { ttftMs: number; inputTokens: number; cachedTokens: number }
type TextPart = { text: string }
/** One streamed turn of an agent: `first` replaces the instructions' first character, `user` the user's words. */
type Agent = (server: ChatdServer, first: string, user: string) => Promise<Turn>

const codex: Agent = async (server, first, user) => {
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
  return { ttftMs, inputTokens: usage?.input_tokens ?? NaN, cachedTokens: usage?.input_tokens_details?.cached_tokens ?? 0 }
}

const claudeCode: Agent = async (server, first, user) => {
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
  const cached = usage?.cache_read_input_tokens ?? startUsage?.cache_read_input_tokens ?? 0
  // Anthropic's input_tokens leaves out what was read from the cache.
  return { ttftMs, inputTokens: (usage?.input_tokens ?? startUsage?.input_tokens ?? NaN) + cached, cachedTokens: cached }
}

const agents: Record<string, Agent> = { codex, 'claude-code': claudeCode }
const chosen = values.agent === 'both' ? Object.keys(agents) : [values.agent!]
if (chosen.some(name => agents[name] === undefined)) throw new Error(`--agent must be codex, claude-code or both (got ${values.agent})`)

const median = (xs: number[]): number => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]
const seconds = (turns: Turn[]): string => `${(median(turns.map(t => t.ttftMs)) / 1000).toFixed(2)} s median (${(Math.min(...turns.map(t => t.ttftMs)) / 1000).toFixed(2)}-${(Math.max(...turns.map(t => t.ttftMs)) / 1000).toFixed(2)})`
const cpu = os.cpus()[0]?.model ?? 'unknown CPU'
const avx512 = fs.existsSync('/proc/cpuinfo') && fs.readFileSync('/proc/cpuinfo', 'utf8').includes('avx512f')
console.log(`Agent turns on the 1.5B-shaped model (${values.dtype}), ${cpu}, ${os.availableParallelism()} cores, AVX-512 ${avx512 ? 'yes' : 'no'}, ${rounds} rounds`)

const server = await startChatdServer({ root: ROOT, out: OUT, modelDir: benchModelDir(), dtype: values.dtype!, env: { PREFIX_CACHE: '1' }, name: 'agent' })
try {
  for (const name of chosen) {
    const uncached: Turn[] = []
    const cached: Turn[] = []
    for (let r = 0; r < rounds; r++) {
      const marker = String.fromCharCode(65 + r + (name === 'codex' ? 0 : 16)) // a first character no earlier round used
      uncached.push(await agents[name](server, marker, `Round ${r}: list the files here.`))
      cached.push(await agents[name](server, marker, `Round ${r}: now show me the README.`))
      console.error(`${name} round ${r + 1}/${rounds}: uncached ${uncached.at(-1)!.ttftMs.toFixed(0)} ms, cached ${cached.at(-1)!.ttftMs.toFixed(0)} ms`)
    }
    console.log(`${name}: prompt ${uncached[0].inputTokens} tokens (instructions, tools and the user's words)`)
    console.log(`  time to first token, nothing cached: ${seconds(uncached)}`)
    console.log(`  time to first token, instructions cached (${median(cached.map(t => t.cachedTokens))} of ${median(cached.map(t => t.inputTokens))} tokens reused): ${seconds(cached)}`)
  }
} finally {
  await server.stop()
}
