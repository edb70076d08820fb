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

/**
 * Why a request for an unavailable model is refused: the summary for everyone, the operator's
 * reason for admins and the log. A model on its way back (a download under way) is 503
 * model_unavailable with Retry-After; one that stays out until the operator acts is 400
 * model_out_of_service, which no client retries: a 503 kept Claude Code retrying for three
 * minutes and Codex for half of one before either showed the reason.
 */
export function unavailableError (id: string, state: UnavailableState): ApiError {
  if (state.retryAfterS !== undefined) {
    return new ApiError('model_unavailable', `The model '${id}' is unavailable: ${publicReason(state)}.`, {
      param: 'model',
      headers: { 'retry-after': String(state.retryAfterS) },
      operatorMessage: `The model '${id}' is unavailable: ${operatorReason(state)}`,
    })
  }
  const after = ' It stays so until the server\'s operator acts: use a model that is ready (the model list says which).'
  return new ApiError('model_out_of_service', `The model '${id}' is out of service: ${publicReason(state)}.${after}`, {
    param: 'model',
    operatorMessage: `The model '${id}' is out of service: ${operatorReason(state)}.${after}`,
  })
}
