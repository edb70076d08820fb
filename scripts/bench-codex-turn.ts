// What one Codex CLI turn costs on the local model: the Responses body Codex
// 0.169.0 really sends (test/fixtures/responses/codex-turn1.json: about 19,000
// characters of developer instructions, 13 function tools, the user's words),
// streamed to `chatd serve` on the benchmarks' model (seeded random weights in
// the exact DeepSeek-R1-Distill-Qwen-1.5B shape, Qwen tokenizer). Reports the
// prompt's tokens, and the time to the first streamed delta with nothing
// cached (each such round changes the instructions' first character, so no
// prefix matches) and with the instructions cached (the same instructions, a
// new user message: what the next turn of a thread, or a new thread, finds).
//
//   node scripts/bench-codex-turn.ts [--rounds 3] [--dtype q4]
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { parseArgs } from 'node:util'
import { benchModelDir } from './bench-model.ts'
import { BENCH_MODEL_ID, startChatdServer } from './bench/chatd-server.ts'

const ROOT = path.resolve(path.dirname(new URL(import.meta.url).pathname), '..')
const { values } = parseArgs({ options: { rounds: { type: 'string', default: '3' }, dtype: { type: 'string', default: 'q4' } } })
const rounds = Number(values.rounds)
const OUT = path.join(ROOT, 'bench-out', 'codex-turn')

const captured = JSON.parse(fs.readFileSync(path.join(ROOT, 'test/fixtures/responses/codex-turn1.json'), 'utf8')) as Record<string, unknown> & { input: Array<Record<string, unknown>> }
const server = await startChatdServer({ root: ROOT, out: OUT, modelDir: benchModelDir(), dtype: values.dtype!, env: { PREFIX_CACHE: '1' }, name: 'codex' })

interface Turn { ttftMs: number; inputTokens: number; cachedTokens: number }

/** One streamed turn: `first` replaces the first developer message's first character, `user` the last user message's text. */
async function turn (first: string, user: string): Promise<Turn> {
  const input = structuredClone(captured.input)
  const developer = input.find(i => i.role === 'developer') as { content: Array<{ text: string }> }
  developer.content[0].text = first + developer.content[0].text.slice(1)
  const lastUser = input.findLast(i => i.role === 'user') as { content: Array<{ text: string }> }
  lastUser.content = [{ ...lastUser.content[0], text: user }]
  const started = performance.now()
  let ttftMs = NaN
  let usage: { input_tokens: number; input_tokens_details?: { cached_tokens?: number } } | undefined
  const stream = await server.client.responses.create({ ...captured, input, model: BENCH_MODEL_ID, max_output_tokens: 8, stream: true } as never) as unknown as AsyncIterable<{ type: string; response?: { usage?: typeof usage } }>
  for await (const event of stream) {
    if (Number.isNaN(ttftMs) && event.type.endsWith('.delta')) ttftMs = performance.now() - started
    if (event.response?.usage) usage = event.response.usage
  }
  return { ttftMs, inputTokens: usage?.input_tokens ?? NaN, cachedTokens: usage?.input_tokens_details?.cached_tokens ?? 0 }
}

const median = (xs: number[]): number => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]
const uncached: Turn[] = []
const cached: Turn[] = []
try {
  for (let r = 0; r < rounds; r++) {
    const marker = String.fromCharCode(65 + r) // a first character no earlier round used
    uncached.push(await turn(marker, `Round ${r}: list the files here.`))
    cached.push(await turn(marker, `Round ${r}: now show me the README.`))
    console.error(`round ${r + 1}/${rounds}: uncached ${uncached.at(-1)!.ttftMs.toFixed(0)} ms, cached ${cached.at(-1)!.ttftMs.toFixed(0)} ms`)
  }
} finally {
  await server.stop()
}
const cpu = os.cpus()[0]?.model ?? 'unknown CPU'
const avx512 = fs.existsSync('/proc/cpuinfo') && fs.readFileSync('/proc/cpuinfo', 'utf8').includes('avx512f')
const fmt = (turns: Turn[]): string => `${(median(turns.map(t => t.ttftMs)) / 1000).toFixed(2)} s median (${(Math.min(...turns.map(t => t.ttftMs)) / 1000).toFixed(2)}-${(Math.max(...turns.map(t => t.ttftMs)) / 1000).toFixed(2)})`
console.log(`Codex turn on the 1.5B-shaped model (${values.dtype}), ${cpu}, ${os.availableParallelism()} cores, AVX-512 ${avx512 ? 'yes' : 'no'}, ${rounds} rounds`)
console.log(`  prompt: ${uncached[0].inputTokens} tokens (instructions, tools and the user's words)`)
console.log(`  time to first token, nothing cached: ${fmt(uncached)}`)
console.log(`  time to first token, instructions cached (${median(cached.map(t => t.cachedTokens))} of ${median(cached.map(t => t.inputTokens))} tokens reused): ${fmt(cached)}`)
