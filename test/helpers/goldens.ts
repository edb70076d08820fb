// stories260k's public goldens (test/fixtures/stories260k/goldens.json): prompts and the
// reference implementation's greedy continuations, and the greedy loop that replays one
// through a cache layout, on whichever device its session runs.
import fs from 'node:fs'
import path from 'node:path'
import type { CacheLayout } from '../../src/engine/onnx/cache/kv-cache.ts'
import { argmax } from '../../src/engine/onnx/sampling/sampler.ts'
import { STORIES_SOURCE } from './models.ts'

export interface Golden { prompt: string; prompt_ids: number[]; generated_ids: number[]; completion_text: string }
export const goldens: Golden[] = JSON.parse(fs.readFileSync(path.join(STORIES_SOURCE, 'goldens.json'), 'utf8')).cases

/** Greedy ids for a golden's prompt, as many as it has, a token at a time; and the positions left cached. */
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
