// Why a model cannot answer, told two ways: the operator's reason and hint
// (a path on the server, the command that fixes it) for the log, the CLI and
// admin accounts, and a short summary for every other key holder, who can do
// nothing about the server's inside and should not be shown it.

import { ApiError } from '../errors.ts'
import type { BackendState } from './backend.ts'

export type UnavailableState = Extract<BackendState, { state: 'unavailable' }>

/** What an ordinary account is told when a model's state gives no summary. */
export const GENERIC_SUMMARY = 'it cannot be used on this server right now'

/** The short reason every key holder may read: no paths, no commands. */
export function publicReason (state: UnavailableState): string {
  return state.summary ?? GENERIC_SUMMARY
}

/** The whole reason, with the hint: for the log, the CLI and admin accounts. */
export function operatorReason (state: UnavailableState): string {
  return state.hint ? `${state.reason} (${state.hint})` : state.reason
}

/** 503 model_unavailable: the summary for everyone, the operator's reason for admins and the log. */
export function unavailableError (id: string, state: UnavailableState, opts: { headers?: Record<string, string> } = {}): ApiError {
  return new ApiError('model_unavailable', `The model '${id}' is unavailable: ${publicReason(state)}.`, {
    param: 'model',
    headers: opts.headers,
    operatorMessage: `The model '${id}' is unavailable: ${operatorReason(state)}`,
  })
}
