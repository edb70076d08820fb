// A fast OpenAI-compatible model server on loopback, for tests that need a
// real chatd process answering many requests without spending the CPU on a
// model: each reply streams `words` with `delayMs` between them (so requests
// are in flight when a fault hits) and reports exact usage. Served to chatd as
// an `"backend": "openai"` model; `modelsFile` writes the models.json.

import { writeFileSync } from 'node:fs'
import { join } from 'node:path'
import type { Test } from 'tap'
import { chunk, loopbackServer, sseData, sseHead, type Loopback } from '../upstream/loopback.ts'

export const FAKE_MODEL = 'fake'

export async function fakeUpstream (t: Test, opts: { words?: string[]; delayMs?: number } = {}): Promise<Loopback> {
  const words = opts.words ?? ['Once', ' upon', ' a', ' time']
  const delayMs = opts.delayMs ?? 20
  return loopbackServer(t, async (_req, res) => {
    sseHead(res)
    sseData(res, chunk({ role: 'assistant', content: '' }))
    for (const word of words) {
      await new Promise(resolve => setTimeout(resolve, delayMs))
      if (res.destroyed) return
      sseData(res, chunk({ content: word }))
    }
    sseData(res, chunk({}, 'stop'))
    sseData(res, { id: 'chatcmpl-upstream', object: 'chat.completion.chunk', created: 1, model: 'm', choices: [], usage: { prompt_tokens: 5, completion_tokens: words.length, total_tokens: 5 + words.length } })
    sseData(res, '[DONE]')
    res.end()
  })
}

/** Writes models.json serving the fake upstream as FAKE_MODEL into `dir`; returns its path. */
export function fakeModelsFile (dir: string, upstream: Loopback): string {
  const file = join(dir, 'models.json')
  writeFileSync(file, JSON.stringify({ models: [{ id: FAKE_MODEL, backend: 'openai', baseUrl: `${upstream.url}/v1`, upstreamModel: 'm' }] }))
  return file
}
