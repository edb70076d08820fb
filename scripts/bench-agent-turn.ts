// What one agent turn costs on the local model: the bodies the Codex CLI
// (0.169.0, Responses API: test/fixtures/responses/codex-turn1.json) and Claude
// Code (2.1.332, Messages API: test/fixtures/claude-code-first-turn.json)
// really send, streamed to `chatd serve` on the benchmarks' model (seeded
// random weights in the exact DeepSeek-R1-Distill-Qwen-1.5B shape, Qwen
// tokenizer). Reports the prompt's tokens, and the time to the first streamed
// delta with nothing cached (each such round changes the instructions' first
// character, so no prefix matches) and with the instructions cached (the same
// instructions, a new user message: what the next turn of a session, or a new
// session of the same account, finds), and the time to the stream's end (its
// 8 tokens and usage).
//
//   node scripts/bench-agent-turn.ts [--agent codex|claude-code|both] [--rounds 3] [--dtype q4]
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { benchModelDir } from './bench-model.ts'
import { AGENTS, type Turn } from './bench/agent-turns.ts'
import { startChatdServer } from './bench/chatd-server.ts'
import { scriptArgs } from './script-args.ts'

const ROOT = path.resolve(path.dirname(new URL(import.meta.url).pathname), '..')
const { values } = scriptArgs(import.meta.url, { options: { agent: { type: 'string', default: 'both' }, rounds: { type: 'string', default: '3' }, dtype: { type: 'string', default: 'q4' } } })
const rounds = Number(values.rounds)
const OUT = path.join(ROOT, 'bench-out', 'agent-turn')

const agents = AGENTS
const chosen = values.agent === 'both' ? Object.keys(agents) : [values.agent!]
if (chosen.some(name => agents[name] === undefined)) throw new Error(`--agent must be codex, claude-code or both (got ${values.agent})`)

const median = (xs: number[]): number => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]
const seconds = (turns: Turn[], of: (t: Turn) => number = t => t.ttftMs): string => {
  const ms = turns.map(of)
  return `${(median(ms) / 1000).toFixed(2)} s median (${(Math.min(...ms) / 1000).toFixed(2)}-${(Math.max(...ms) / 1000).toFixed(2)})`
}
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
      console.error(`${name} round ${r + 1}/${rounds}: uncached ${uncached.at(-1)!.ttftMs.toFixed(0)} ms (end ${uncached.at(-1)!.endMs.toFixed(0)}), cached ${cached.at(-1)!.ttftMs.toFixed(0)} ms (end ${cached.at(-1)!.endMs.toFixed(0)})`)
    }
    console.log(`${name}: prompt ${uncached[0].inputTokens} tokens (instructions, tools and the user's words)`)
    console.log(`  time to first token, nothing cached: ${seconds(uncached)}`)
    console.log(`  time to first token, instructions cached (${median(cached.map(t => t.cachedTokens))} of ${median(cached.map(t => t.inputTokens))} tokens reused): ${seconds(cached)}`)
    console.log(`  time to the reply's end (8 tokens), nothing cached: ${seconds(uncached, t => t.endMs)}; instructions cached: ${seconds(cached, t => t.endMs)}`)
  }
} finally {
  await server.stop()
}
