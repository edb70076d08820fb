// The requests that show a device gives the CPU provider's tokens: greedy, on
// one engine per device in this thread, compared whole. The WebGPU tests
// (test/engine/onnx/device/webgpu-exactness.test.ts, on lavapipe in CI) and
// scripts/webgpu-exactness.ts (on a real GPU, from scripts/gpu-check.sh) run
// these same scenarios, and replay stories260k's public goldens on the device.
import fs from 'node:fs'
import path from 'node:path'
import type { ChatMessage, GenerateRequest } from '../../src/engine/backend.ts'
import { cacheLayoutFor, type CacheLayout } from '../../src/engine/onnx/cache/kv-cache.ts'
import { DecoderSession } from '../../src/engine/onnx/device/decoder-session.ts'
import type { Device } from '../../src/engine/onnx/device/providers.ts'
import { readModelDir, type ModelDtype } from '../../src/engine/onnx/model-dir.ts'
import { argmax } from '../../src/engine/onnx/sampling/sampler.ts'
import { LocalEngine, type EngineSettings } from '../../src/engine/onnx/scheduler/engine.ts'
import { nextTurnStart } from '../../src/prompt/shape.ts'

const ROOT = path.resolve(path.dirname(new URL(import.meta.url).pathname), '../..')

export interface Reply { text: string; completion: number; cached: number }

/**
 * batches()'s replies without their cached counts: what exactness compares where the two devices
 * may schedule differently (a gqa-masked graph on a software renderer feeds at most 31 tokens a
 * run, so prompts that arrive together are not fed whole in one run there, and reuse cached prefixes).
 */
export function tokensOf (replies: { solo: Reply; together: Reply[]; join: Reply[] }): unknown {
  const strip = (r: Reply) => ({ text: r.text, completion: r.completion })
  return { solo: strip(replies.solo), together: replies.together.map(strip), join: replies.join.map(strip) }
}

/** The user turns of the conversations (stories260k's kind of text). */
export const USER_TURNS = [
  'Once upon a time there was a little dog named Max who lived in a small house near the woods.',
  'One day Max found a big red ball in the garden.',
  'Max wanted to show the ball to his friend the cat.',
  'The cat was sleeping under the tree.',
]

/** An engine in this thread on `device` (with `settings`), with a promise per request and a callback on each delta. */
export async function engineOn (dir: string, dtype: ModelDtype, device: Device, settings: Partial<EngineSettings> = {}) {
  const texts = new Map<string, string>()
  const done = new Map<string, (r: Reply) => void>()
  const onDelta = new Map<string, () => void>()
  const engine = await LocalEngine.load({ modelDir: dir, dtype, device, threads: 2, ...settings }, {
    delta: (id, text) => {
      texts.set(id, (texts.get(id) ?? '') + text.reasoning + text.content)
      onDelta.get(id)?.()
    },
    finish: (id, _reason, usage) => done.get(id)?.({ text: texts.get(id) ?? '', completion: usage.completion_tokens, cached: usage.prompt_tokens_details?.cached_tokens ?? 0 }),
    error: (_id, err) => { throw err },
  })
  let n = 0
  const generate = (messages: ChatMessage[], maxTokens: number, deltas?: () => void): Promise<Reply> => {
    const id = `r${n++}`
    if (deltas) onDelta.set(id, deltas)
    const result = new Promise<Reply>(resolve => done.set(id, resolve))
    engine.start({ messages, temperature: 0, topP: 1, topK: 0, stop: [], maxTokens } satisfies GenerateRequest, id)
    return result
  }
  return { engine, generate }
}

const user = (content: string): ChatMessage[] => [{ role: 'user', content }]

/** Tokens decoded on the capture step (ONNX_WEBGPU_CAPTURE): what the device layout counted. */
function capturedSteps (engine: LocalEngine): number {
  return engine.cacheLayout.replayedTokens ?? 0
}

/** One request alone; three together; one joining another after that one's fourth token. */
export async function batches (dir: string, dtype: ModelDtype, device: Device, settings: Partial<EngineSettings> = {}) {
  const { engine, generate } = await engineOn(dir, dtype, device, settings)
  try {
    const solo = await generate(user(USER_TURNS[0]), 40)
    const together = await Promise.all([
      generate(user('Once upon a time'), 30),
      generate(user('The little dog ran to the park and saw a big red ball. He'), 30),
      generate(user('Lily'), 30),
    ])
    let joined: Promise<Reply> | undefined
    let tokens = 0
    const first = generate(user(USER_TURNS[1]), 36, () => {
      if (++tokens === 4) joined = generate(user(USER_TURNS[2]), 24)
    })
    const join = [await first, await joined!]
    return { device: engine.session.device, cacheOnDevice: engine.session.cacheOnDevice, cacheInPlace: engine.session.cacheInPlace, softwareRenderer: engine.session.softwareRenderer, replies: { solo, together, join }, ...(settings.webgpuCapture ? { capturedSteps: capturedSteps(engine) } : {}) }
  } finally {
    await engine.close()
  }
}

/** Four turns, each reply's conversation computed ahead before the next turn (as the server does), but for turn 3, which starts from the prefix cache alone. */
export async function conversation (dir: string, dtype: ModelDtype, device: Device, settings: Partial<EngineSettings> = {}) {
  const { engine, generate } = await engineOn(dir, dtype, device, settings)
  try {
    const messages: ChatMessage[] = []
    const replies: Reply[] = []
    for (const [i, turn] of USER_TURNS.entries()) {
      messages.push({ role: 'user', content: turn })
      const reply = await generate([...messages], 24)
      replies.push(reply)
      if (i !== 1) engine.prepareNextTurn(nextTurnStart([...messages], reply.text))
      messages.push({ role: 'assistant', content: reply.text })
      await engine.idle()
    }
    return { replies, ahead: engine.tokensComputedAhead, ...(settings.webgpuCapture ? { capturedSteps: capturedSteps(engine) } : {}) }
  } finally {
    await engine.close()
  }
}

/** stories260k's public goldens (test/fixtures/stories260k/goldens.json): prompts and the reference implementation's greedy continuations. */
export interface Golden { prompt: string; prompt_ids: number[]; generated_ids: number[]; completion_text: string }
export const goldens: Golden[] = JSON.parse(fs.readFileSync(path.join(ROOT, 'test/fixtures/stories260k/goldens.json'), 'utf8')).cases

/** Greedy ids for a golden's prompt, as many as it has, a token at a time through a cache layout; and the positions left cached. */
export async function replayGolden (layout: CacheLayout, golden: Golden): Promise<{ ids: number[]; cached: number[] }> {
  let cache = layout.empty()
  let feed = golden.prompt_ids
  const ids: number[] = []
  while (ids.length < golden.generated_ids.length) {
    const out = await layout.run(cache, [feed], 1)
    cache = out.cache
    const next = argmax(out.logits)
    ids.push(next)
    feed = [next]
  }
  const cached = [...cache.lengths]
  layout.free(cache)
  return { ids, cached }
}

/** Every golden replayed on `device` (a session of its own): whether each gives the reference's tokens, and the positions cached. */
export async function goldensOn (dir: string, device: Device): Promise<{ device: Device; cacheOnDevice: boolean; same: boolean[]; cached: number[][] }> {
  const session = await DecoderSession.load(readModelDir(dir, 'fp32'), { device, threads: 2 })
  try {
    const layout = cacheLayoutFor(session)
    const same: boolean[] = []
    const cached: number[][] = []
    for (const golden of goldens) {
      const replay = await replayGolden(layout, golden)
      same.push(JSON.stringify(replay.ids) === JSON.stringify(golden.generated_ids))
      cached.push(replay.cached)
    }
    return { device: session.device, cacheOnDevice: session.cacheOnDevice, same, cached }
  } finally {
    await session.close()
  }
}
