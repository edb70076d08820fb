// Which model the new-key page's examples name: one that answers now, so the
// examples work when pasted. For curl and Node, a local model first (it is
// this server's own), else any ready one the account's tier may use. For each
// agent, the first ready model whose context window holds that agent's prompt
// (or whose window is unknown): the agents' prompts are thousands of tokens,
// and a small model first in line would fail every turn. When none is ready
// the page says so and lists every model with its state instead of naming one
// that would fail.

import type { BackendState } from '../engine/backend.ts'
import type { ModelRegistry, RegisteredModel } from '../engine/registry.ts'
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

/** The model an agent's snippet names. */
export type AgentModel =
  /** Ready, and its window holds the agent's prompt (or is not known). */
  | { model: SetupModel; ready: true }
  /** No ready model can: this one could once the operator has it ready (`status`: what it is now). */
  | { model: SetupModel; ready: false; status: string }

type Models = Pick<ModelRegistry, 'list' | 'state'>

function statusOf (state: BackendState, allowed: boolean): string {
  switch (state.state) {
    case 'ready': return allowed ? 'ready' : 'ready, but your tier may not use it'
    case 'loading': return 'loading'
    case 'unavailable': return `unavailable: ${publicReason(state)}`
  }
}

const setupModel = (m: RegisteredModel): SetupModel => ({ id: m.id, contextLength: m.backend.contextLength })

export function chooseSetupModel (models: Models, allowed: (id: string) => boolean): SetupModelChoice {
  const all = models.list()
  const usable = all.filter(m => models.state(m.id).state === 'ready' && allowed(m.id))
  // Only local (onnx) models are registered with the execution provider they asked for.
  const chosen = usable.find(m => m.requestedDevice !== undefined) ?? usable[0]
  if (chosen) return { model: setupModel(chosen) }
  return { models: all.map(m => ({ id: m.id, status: statusOf(models.state(m.id), allowed(m.id)) })) }
}

/**
 * The model for an agent whose prompt is about `promptTokens` long: the first ready one (in
 * models.json's order) the tier may use whose window holds it or is unknown; else the first the
 * tier may use that could once it is ready (loading ones first: they need no one); else none.
 */
export function chooseAgentModel (models: Models, allowed: (id: string) => boolean, promptTokens: number): AgentModel | undefined {
  const holds = (m: RegisteredModel): boolean => m.backend.contextLength === undefined || m.backend.contextLength >= promptTokens
  const candidates = models.list().filter(m => allowed(m.id) && holds(m))
  const ready = candidates.find(m => models.state(m.id).state === 'ready')
  if (ready) return { model: setupModel(ready), ready: true }
  const waiting = candidates.find(m => models.state(m.id).state === 'loading') ?? candidates[0]
  if (waiting) return { model: setupModel(waiting), ready: false, status: statusOf(models.state(waiting.id), true) }
  return undefined
}
