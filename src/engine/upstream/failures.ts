// Everything that can go wrong with an upstream, as the API's errors. The
// messages are chatd's own words: they never carry the upstream's address or
// key, nor text the upstream sent (which may echo either).

import { ApiError } from '../../errors.ts'

const WHO = 'The upstream model server'

export function unreachable (cause: string): ApiError {
  return new ApiError('upstream_error', `${WHO} could not be reached (${cause}).`)
}

export function timedOut (phase: 'connect' | 'first byte' | 'idle', ms: number): ApiError {
  const what = phase === 'connect'
    ? `did not accept a connection within ${ms} ms`
    : phase === 'first byte'
      ? `did not start its reply within ${ms} ms`
      : `stopped sending for ${ms} ms in the middle of its reply`
  return new ApiError('upstream_timeout', `${WHO} ${what}.`)
}

/** A non-2xx answer. A context overflow is the client's problem and says so; the rest is the server's. */
export function refused (status: number, contextOverflow: boolean, badParam?: RelayedParam): ApiError {
  if (contextOverflow) {
    return new ApiError('context_length_exceeded', 'The conversation plus the room asked for the reply is longer than the model\'s context window.', { param: 'messages' })
  }
  if (badParam !== undefined) {
    return new ApiError('invalid_parameter', `The model's server refused the request's ${RELAYED_WHAT[badParam]} (HTTP ${status}): it cannot use what was given.`, { param: badParam })
  }
  const why = status === 401 || status === 403
    ? `refused chatd's credentials (HTTP ${status}); the operator should check the model's apiKey`
    : status === 404
      ? `does not serve the configured model (HTTP ${status})`
      : status === 429
        ? `is rate-limiting chatd (HTTP ${status})`
        : status >= 400 && status < 500
          ? `rejected the request (HTTP ${status})`
          : `failed (HTTP ${status})`
  return new ApiError('upstream_error', `${WHO} ${why}.`)
}

export function unreadable (what: string): ApiError {
  return new ApiError('upstream_error', `${WHO} sent a reply chatd could not read (${what}).`)
}

export function cutOff (): ApiError {
  return new ApiError('upstream_error', `${WHO} closed the connection before the reply was complete.`)
}

export function reportedError (): ApiError {
  return new ApiError('upstream_error', `${WHO} reported an error in the middle of its reply.`)
}

/** Fields chatd passes on as the client gave them: a 400 about one of them is the client's to fix. */
const RELAYED_PARAMS = ['response_format', 'logprobs', 'top_logprobs'] as const
export type RelayedParam = typeof RELAYED_PARAMS[number]

/** What each relayed field asks for, in words (each door names the field itself, in the error's param). */
const RELAYED_WHAT: Record<RelayedParam, string> = { response_format: 'response format', logprobs: 'log-probabilities', top_logprobs: 'log-probabilities' }

/** The relayed field an upstream's 400 body names in `error.param` (OpenAI's and chatd's error shape), if any. */
export function relayedParamRefused (body: unknown): RelayedParam | undefined {
  const error = (body as { error?: unknown })?.error
  const param = typeof error === 'object' && error !== null ? (error as { param?: unknown }).param : undefined
  if (typeof param !== 'string') return undefined
  return RELAYED_PARAMS.find(name => param === name || param.startsWith(`${name}.`))
}

/** Statuses worth another attempt: the request itself was fine, the server was not. */
export function retryableStatus (status: number): boolean {
  return status === 408 || status === 429 || status === 500 || status === 502 || status === 503 || status === 504
}

/** Does an upstream's 400 body say the prompt was too long? (vLLM, llama.cpp, OpenAI and Ollama word it differently.) */
export function saysContextOverflow (body: unknown): boolean {
  const error = (body as { error?: unknown })?.error
  const code = typeof error === 'object' && error !== null ? (error as { code?: unknown }).code : undefined
  if (code === 'context_length_exceeded') return true
  const message = typeof error === 'string' ? error : typeof error === 'object' && error !== null ? (error as { message?: unknown }).message : undefined
  return typeof message === 'string' && /context length|context window|maximum context|context size|too many tokens|prompt is too long|exceeds the available context/i.test(message)
}
