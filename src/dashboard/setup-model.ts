// Which model the new-key page's examples name: one that answers now, so the
// examples work when pasted. A local model first (it is this server's own),
// else any ready one the account's tier may use. When none is ready the page
// says so and lists every model with its state instead of naming one that
// would fail.

import type { BackendState } from '../engine/backend.ts'
import type { ModelRegistry } from '../engine/registry.ts'
import { publicReason } from '../engine/unavailable.ts'

export interface SetupModel {
  id: string
  /** The context window in tokens, when the backend knows it. */
  contextLength?: number
}

export interface ModelStatus {
  id: string
  /** In words, for key holders: never the server's paths or commands. */
  status: string
}

export type SetupModelChoice =
  | { model: SetupModel }
  | { model?: undefined; models: ModelStatus[] }

function statusOf (state: BackendState, allowed: boolean): string {
  switch (state.state) {
    case 'ready': return allowed ? 'ready' : 'ready, but your tier may not use it'
    case 'loading': return 'loading'
    case 'unavailable': return `unavailable: ${publicReason(state)}`
  }
}

export function chooseSetupModel (models: Pick<ModelRegistry, 'list' | 'state'>, allowed: (id: string) => boolean): SetupModelChoice {
  const all = models.list()
  const usable = all.filter(m => models.state(m.id).state === 'ready' && allowed(m.id))
  // Only local (onnx) models are registered with the execution provider they asked for.
  const chosen = usable.find(m => m.requestedDevice !== undefined) ?? usable[0]
  if (chosen) return { model: { id: chosen.id, contextLength: chosen.backend.contextLength } }
  return { models: all.map(m => ({ id: m.id, status: statusOf(models.state(m.id), allowed(m.id)) })) }
}
