// Turns everything that can go wrong in a request into the one error body.
// ApiErrors carry their own status and code; Fastify's own errors (schema
// validation, JSON parsing, body size, media type, routing) are mapped here so
// clients only ever see codes from the table in src/errors.ts.

import type { FastifyError, FastifyInstance, FastifyReply, FastifyRequest } from 'fastify'
import { ApiError, type ErrorCode } from '../errors.ts'
import { redactSecretLooking } from '../logging.ts'
import { CACHE_SALT_MAX, WORDCOUNT_MAX } from './pipeline/request.ts'
import { anthropicErrorBody, anthropicStatus } from './messages/errors.ts'
import { isRedisUnavailable, limitsUnavailableError } from '../limits/unavailable.ts'
import { databaseUnavailableError, isDatabaseUnavailable } from '../store/unavailable.ts'
import type { Metrics } from './metrics/metrics.ts'

interface ValidationIssue {
  keyword: string
  instancePath: string
  message?: string
  params: Record<string, unknown>
}

/**
 * Ajv's `/messages/0/role` becomes `messages[0].role`: the OpenAI-style
 * spelling of a field path, used for `param` throughout the API.
 */
export function paramFromPointer (pointer: string): string {
  let param = ''
  for (const segment of pointer.split('/').slice(1)) {
    const name = segment.replaceAll('~1', '/').replaceAll('~0', '~')
    param += /^\d+$/.test(name) ? `[${name}]` : (param === '' ? name : `.${name}`)
  }
  return param
}

/** Wordings for fields whose schema is a union, where Ajv's per-branch messages would mislead. */
const UNION_FIELD_MESSAGES: Record<string, string> = {
  wordcount: `must be "Default" or an integer from 1 to ${WORDCOUNT_MAX}`,
  content: 'must be a string or an array of {"type":"text","text":string} parts',
  stop: 'must be a string or an array of at most 4 non-empty strings',
  response_format: 'must be {"type":"text"}, {"type":"json_object"} or {"type":"json_schema","json_schema":{"name":…,"schema":{…}}}',
  top_logprobs: 'must be an integer from 0 to 20',
  logprobs: 'must be a boolean',
  cache_salt: `must be a string of 1 to ${CACHE_SALT_MAX} printable ASCII characters`,
}

function lastName (param: string): string {
  return param.replace(/\[\d+\]$/, '').split('.').at(-1) ?? param
}

/** Picks the field at fault from Ajv's errors and words the message. */
export function validationToApiError (issues: ValidationIssue[], context = 'body'): ApiError {
  // For a union, Ajv lists every branch's complaint and then an anyOf error at
  // the field itself. When a branch got further into the value (an object or
  // array of the right shape with one bad part), its complaint is the precise
  // one; otherwise the value fits no branch and the union field is at fault.
  let union = issues.find(i => i.keyword === 'anyOf' || i.keyword === 'oneOf')
  let issue = union ?? issues[0]
  if (union) {
    const deeper = issues.filter(i => i.instancePath.startsWith(union!.instancePath + '/'))
      .sort((a, b) => b.instancePath.length - a.instancePath.length)[0]
    if (deeper) {
      issue = deeper
      union = undefined
    }
  }
  if (issue === undefined) return new ApiError('invalid_parameter', `Invalid request ${context}`)
  let param = paramFromPointer(issue.instancePath)
  if (issue.keyword === 'required') {
    const missing = String(issue.params.missingProperty)
    param = param === '' ? missing : `${param}.${missing}`
    return new ApiError('invalid_parameter', `Missing required parameter: '${param}'.`, { param })
  }
  if (param === '' && issue.keyword === 'maxProperties') {
    return new ApiError('invalid_parameter', `The request ${context} has too many fields: at most ${String(issue.params.limit)} are accepted, known and unknown together.`, { param: null })
  }
  if (param === '') return new ApiError('invalid_parameter', `The request ${context} must be a JSON object.`, { param: null })
  let detail = union ? (UNION_FIELD_MESSAGES[lastName(param)] ?? 'has an invalid type or value') : (issue.message ?? 'is invalid')
  if (Array.isArray(issue.params.allowedValues)) detail += `: ${issue.params.allowedValues.map(v => JSON.stringify(v)).join(', ')}`
  if (issue.keyword === 'const' && issue.params.allowedValue !== undefined) detail = `must be ${JSON.stringify(issue.params.allowedValue)}`
  return new ApiError('invalid_parameter', `Invalid value for '${param}': ${detail}.`, { param })
}

const FASTIFY_CODES: Record<string, { code: ErrorCode; message: string }> = {
  FST_ERR_CTP_BODY_TOO_LARGE: { code: 'request_too_large', message: 'The request body is larger than the server accepts (its BODY_LIMIT setting).' },
  FST_ERR_CTP_INVALID_MEDIA_TYPE: { code: 'unsupported_media_type', message: 'Unsupported Content-Type; send application/json.' },
  FST_ERR_CTP_INVALID_CONTENT_LENGTH: { code: 'invalid_json', message: 'The request body does not match its Content-Length.' },
  FST_ERR_CTP_EMPTY_JSON_BODY: { code: 'invalid_json', message: 'The request body is empty; send a JSON object.' },
  FST_ERR_CTP_INVALID_JSON_BODY: { code: 'invalid_json', message: 'The request body is not valid JSON.' },
}

export function toApiError (err: FastifyError | Error): ApiError {
  if (err instanceof ApiError) return err
  const fastifyError = err as FastifyError
  if (fastifyError.validation) return validationToApiError(fastifyError.validation as ValidationIssue[], fastifyError.validationContext)
  const known = fastifyError.code ? FASTIFY_CODES[fastifyError.code] : undefined
  if (known) return new ApiError(known.code, known.message)
  // The JSON body parser reports syntax errors as a SyntaxError with status 400.
  if (err instanceof SyntaxError && fastifyError.statusCode === 400) {
    return new ApiError('invalid_json', `The request body is not valid JSON: ${err.message}`)
  }
  if (fastifyError.statusCode === 404) return new ApiError('not_found', err.message)
  if (fastifyError.statusCode === 405) return new ApiError('method_not_allowed', err.message)
  if (fastifyError.statusCode === 413) return new ApiError('request_too_large', FASTIFY_CODES.FST_ERR_CTP_BODY_TOO_LARGE.message)
  if (fastifyError.statusCode === 415) return new ApiError('unsupported_media_type', err.message)
  if (fastifyError.statusCode !== undefined && fastifyError.statusCode >= 400 && fastifyError.statusCode < 500) {
    return new ApiError('invalid_parameter', err.message)
  }
  // A store that is down (restarting, unreachable) is an outage to wait out, not a bug: 503 with Retry-After.
  if (isDatabaseUnavailable(err)) return databaseUnavailableError(err)
  if (isRedisUnavailable(err)) return limitsUnavailableError(err)
  return new ApiError('internal_error', 'The server had an error while processing the request.')
}

/** The Messages API's paths (where Anthropic's clients call), with or without a query. */
const MESSAGES_PATH = /^\/api\/v1\/messages(?:[/?]|$)/

export function sendApiError (reply: FastifyReply, error: ApiError): FastifyReply {
  // The server's inside (paths, operator commands) only to an admin account.
  const forOperator = reply.request.account?.isAdmin === true
  // The Messages API's routes answer in Anthropic's shape and statuses (messages/errors.ts), and so
  // does a path under them no route serves (GET /api/v1/messages): its clients read only that shape.
  const unrouted = reply.request.routeOptions.url === undefined
  if (reply.request.routeOptions.config?.errorShape === 'anthropic' || (unrouted && MESSAGES_PATH.test(reply.request.url))) {
    const message = forOperator ? error.operatorMessage ?? error.message : error.message
    return reply.code(anthropicStatus(error).status).headers(error.headers).type('application/json; charset=utf-8').send(anthropicErrorBody(error, message))
  }
  return reply.code(error.status).headers(error.headers).type('application/json; charset=utf-8').send(error.toBody({ forOperator }))
}

export function installErrorHandling (app: FastifyInstance, metrics: Metrics): void {
  app.setErrorHandler((err: FastifyError, request: FastifyRequest, reply: FastifyReply) => {
    const apiError = toApiError(err)
    // Unexpected failures get the stack; refusals the API expects (overloaded,
    // model unavailable, bad input) are one line.
    if (apiError.code === 'internal_error' && !(err instanceof ApiError)) request.log.error({ err }, 'request failed')
    else if (apiError.status >= 500) request.log.warn({ code: apiError.code, cause: err instanceof ApiError ? undefined : err.message }, apiError.operatorMessage ?? apiError.message)
    // A refusal's message may echo what the client sent (a model id): logged without anything secret-looking.
    else request.log.info({ code: apiError.code, param: apiError.param }, redactSecretLooking(apiError.message))
    metrics.errors.inc({ code: apiError.code })
    return sendApiError(reply, apiError)
  })

  app.setNotFoundHandler((request: FastifyRequest, reply: FastifyReply) => {
    metrics.errors.inc({ code: 'not_found' })
    return sendApiError(reply, new ApiError('not_found', `No route for ${request.method} ${request.url.split('?')[0]}`))
  })
}
