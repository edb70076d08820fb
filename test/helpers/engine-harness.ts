// A real local engine in the test's own thread, on a model directory: each
// request's text, finish reason and token counts, the prompt positions its runs
// computed, and a hook before the next run. The prefix cache's and the next
// turn's tests drive it the same way; only what they check differs.
import fs from 'node:fs'
import path from 'node:path'
import type { Test } from 'tap'
import type { ChatMessage, FinishReason, GenerateRequest } from '../../src/engine/backend.ts'
import type { ForwardInput } from '../../src/engine/onnx/device/decoder-session.ts'
import { LocalEngine, type EngineSettings } from '../../src/engine/onnx/scheduler/engine.ts'
import { DEEPSEEK_R1_DISTILL_TEMPLATE } from './r1-tokenizer.ts'
import { testDevice } from './webgpu.ts'

export interface Outcome { text: string; reason: FinishReason; completion: number; cached: number }

/** The four user turns of the chats these tests hold with stories260k. */
export const USER_TURNS = [
  'Once upon a time there was a little dog named Max who lived in a small house near the woods.',
  'One day Max found a big red ball in the garden.',
  'Max wanted to show the ball to his friend the cat.',
  'The cat was sleeping under the tree.',
]

/**
 * A copy of the model directory `from` in `dir` with another chat template: R1-Distill's by default
 * (it drops earlier turns' thinking, and its generation prompt opens `<think>`, which the history
 * does not repeat, as the real model's does).
 */
export function withChatTemplate (dir: string, from: string, template = DEEPSEEK_R1_DISTILL_TEMPLATE): string {
  fs.cpSync(from, dir, { recursive: true })
  for (const file of fs.readdirSync(dir, { recursive: true }) as string[]) fs.chmodSync(path.join(dir, file), 0o755)
  const file = path.join(dir, 'tokenizer_config.json')
  fs.writeFileSync(file, JSON.stringify({ ...JSON.parse(fs.readFileSync(file, 'utf8')), chat_template: template }))
  return dir
}

/** Loads the engine (closed when `t` ends); `runs.positions` counts the positions fed, `runs.beforeRun` is called once before the next run. */
export async function inThreadEngine (t: Test, dir: string, settings: Partial<EngineSettings> = {}) {
  const texts = new Map<string, string>()
  const done = new Map<string, (o: Outcome) => void>()
  const engine = await LocalEngine.load({ modelDir: dir, dtype: 'fp32', device: testDevice(), threads: 1, ...settings }, {
    delta: (id, text) => texts.set(id, (texts.get(id) ?? '') + text.reasoning + text.content),
    finish: (id, reason, usage) => done.get(id)?.({ text: texts.get(id) ?? '', reason, completion: usage.completion_tokens, cached: usage.prompt_tokens_details?.cached_tokens ?? -1 }),
    error: (_id, err) => { throw err },
  })
  const runs = { positions: 0, beforeRun: null as null | (() => void) }
  const forward = engine.session.forward.bind(engine.session)
  engine.session.forward = (input: ForwardInput) => {
    runs.positions += input.batch * input.inputIds[0].length
    const hook = runs.beforeRun
    runs.beforeRun = null
    hook?.()
    return forward(input)
  }
  let n = 0
  /** Greedy; `scope` is the request's cache scope (an account, as the server sets it). */
  const generate = (messages: ChatMessage[], maxTokens: number, scope?: string): Promise<Outcome> => {
    const id = `r${n++}`
    const result = new Promise<Outcome>(resolve => done.set(id, resolve))
    engine.start({ messages, temperature: 0, topP: 1, topK: 0, stop: [], maxTokens, ...(scope !== undefined ? { cacheScope: scope } : {}) } satisfies GenerateRequest, id)
    return result
  }
  t.teardown(() => engine.close())
  return { engine, generate, runs }
}
