// Every error the API can return, in one table. The HTTP layer turns an ApiError
// into the OpenAI-style body {"error":{message,type,param,code}}; backends and
// domain code throw ApiError and never know about HTTP.

export const ERROR_TABLE = {
  missing_api_key: { status: 401, type: 'authentication_error' },
  invalid_api_key: { status: 401, type: 'authentication_error' },
  invalid_parameter: { status: 400, type: 'invalid_request_error' },
  invalid_json: { status: 400, type: 'invalid_request_error' },
  context_length_exceeded: { status: 400, type: 'invalid_request_error' },
  request_too_large: { status: 413, type: 'invalid_request_error' },
  request_timeout: { status: 408, type: 'invalid_request_error' },
  malformed_request: { status: 400, type: 'invalid_request_error' },
  headers_too_large: { status: 431, type: 'invalid_request_error' },
  unsupported_media_type: { status: 415, type: 'invalid_request_error' },
  not_found: { status: 404, type: 'not_found_error' },
  model_not_found: { status: 404, type: 'not_found_error' },
  method_not_allowed: { status: 405, type: 'invalid_request_error' },
  model_not_allowed: { status: 403, type: 'permission_error' },
  rate_limit_exceeded: { status: 429, type: 'rate_limit_error' },
  allowance_exhausted: { status: 429, type: 'rate_limit_error' },
  server_overloaded: { status: 503, type: 'server_error' },
  limits_unavailable: { status: 503, type: 'server_error' },
  database_unavailable: { status: 503, type: 'server_error' },
  model_unavailable: { status: 503, type: 'server_error' },
  // A model that will not come back without the operator: a 4xx, so that clients (the SDKs,
  // Codex, Claude Code) stop at once instead of retrying a 5xx for minutes (docs/api.md, Errors).
  model_out_of_service: { status: 400, type: 'invalid_request_error' },
  upstream_error: { status: 502, type: 'server_error' },
  upstream_timeout: { status: 504, type: 'server_error' },
  search_unavailable: { status: 400, type: 'invalid_request_error' },
  search_failed: { status: 502, type: 'server_error' },
  internal_error: { status: 500, type: 'server_error' },
} as const satisfies Record<string, { status: number; type: string }>

export type ErrorCode = keyof typeof ERROR_TABLE

export interface ErrorBody {
  error: { message: string; type: string; param: string | null; code: ErrorCode }
}

export class ApiError extends Error {
  readonly code: ErrorCode
  readonly status: number
  readonly type: string
  readonly param: string | null
  /** Extra response headers, e.g. Retry-After for 429/503. */
  readonly headers: Record<string, string>
  /**
   * The message with the server's inside (paths, commands to run), for the
   * log and admin accounts; `message` is what every other caller reads.
   */
  readonly operatorMessage?: string

  constructor (code: ErrorCode, message: string, opts: { param?: string | null; headers?: Record<string, string>; operatorMessage?: string } = {}) {
    // An answer, not a bug: its stack is never logged (the error handler logs one only for an
    // unexpected error), and capturing it cost more than the rest of a refused request (~30 us).
    const stackTraceLimit = Error.stackTraceLimit
    Error.stackTraceLimit = 0
    super(message)
    Error.stackTraceLimit = stackTraceLimit
    this.name = 'ApiError'
    this.code = code
    this.status = ERROR_TABLE[code].status
    this.type = ERROR_TABLE[code].type
    this.param = opts.param ?? null
    this.headers = opts.headers ?? {}
    if (opts.operatorMessage !== undefined) this.operatorMessage = opts.operatorMessage
  }

  /** The error body; `forOperator` (an admin account) gets the operator's message where there is one. */
  toBody (opts: { forOperator?: boolean } = {}): ErrorBody {
    const message = opts.forOperator ? this.operatorMessage ?? this.message : this.message
    return { error: { message, type: this.type, param: this.param, code: this.code } }
  }
}

export function invalidParam (param: string, message: string): ApiError {
  return new ApiError('invalid_parameter', message, { param })
}
