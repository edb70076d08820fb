// Where a models.json entry's files come from and go to.

import type { Config } from '../config.ts'
import type { OnnxModelEntry } from '../engine/models-file.ts'
import type { HubLocation } from './hub.ts'

export const DEFAULT_HF_ENDPOINT = 'https://huggingface.co'

/** The hub repository of a local model (its "hubRepo" in models.json), with HF_ENDPOINT and HF_TOKEN. */
export function hubLocation (entry: OnnxModelEntry & { hubRepo: string }, config: Partial<Pick<Config, 'hfEndpoint' | 'hfToken'>>): HubLocation {
  return {
    endpoint: (config.hfEndpoint ?? DEFAULT_HF_ENDPOINT).replace(/\/+$/, ''),
    repo: entry.hubRepo,
    revision: entry.hubRevision ?? 'main',
    token: config.hfToken,
  }
}

export { pullCommand } from '../engine/models-file.ts'
