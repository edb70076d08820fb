// Errors on the Messages API's routes in Anthropic's shape:
// {"type":"error","error":{"type","message"}} with the status Anthropic uses,
// so its SDK raises the matching error class and Claude Code shows the real
// reason. Overload is 529 overloaded_error, as Anthropic sends it (its clients
// retry that); Retry-After stays as the ApiError carries it.

import type { ApiError } from '../../errors.ts'

declare module 'fastify' {
  interface FastifyContextConfig {
    /** The route's errors leave in Anthropic's shape (the Messages API) instead of the API's own. */
    errorShape?: 'anthropic'
  }
}

export type AnthropicErrorType =
  | 'invalid_request_error' | 'authentication_error' | 'permission_error' | 'not_found_error' | 'request_too_large'
  | 'rate_limit_error' | 'api_error' | 'overloaded_error'

export interface AnthropicErrorBody {
  type: 'error'
  error: { type: AnthropicErrorType; message: string }
}

/** The status and error type Anthropic would answer for this refusal. */
export function anthropicStatus (error: ApiError): { status: number; type: AnthropicErrorType } {
  if (error.code === 'server_overloaded') return { status: 529, type: 'overloaded_error' }
  const status = error.status
  if (status === 401) return { status, type: 'authentication_error' }
  if (status === 403) return { status, type: 'permission_error' }
  if (status === 404) return { status, type: 'not_found_error' }
  if (status === 413) return { status, type: 'request_too_large' }
  if (status === 429) return { status, type: 'rate_limit_error' }
  if (status >= 500) return { status, type: 'api_error' }
  return { status, type: 'invalid_request_error' }
}

/**
 * The body for `error`. The field at fault, which Anthropic's shape has no place for, leads the
 * message when the message does not already name it.
 */
export function anthropicErrorBody (error: ApiError, message = error.message): AnthropicErrorBody {
  const named = error.param !== null && !message.includes(error.param) ? `${error.param}: ${message}` : message
  return { type: 'error', error: { type: anthropicStatus(error).type, message: named } }
}
