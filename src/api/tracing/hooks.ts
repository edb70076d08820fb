// One trace per API request: a server span from the request's arrival to its
// response's end (streams included), whose parent is the caller's
// `traceparent` when it sent one; the completion pipeline hangs the model span
// and its children under it (observe.ts), and `traced` wraps a hook (the key
// check) in a span of its own. Installed only when tracing is on: otherwise no
// hook, and request.trace stays null.

import type { FastifyInstance, FastifyReply, FastifyRequest, onRequestAsyncHookHandler } from 'fastify'
import { SpanKind, SpanStatusCode, trace, type Context, type Span } from '@opentelemetry/api'
import { ApiError } from '../../errors.ts'
import type { Tracing } from './tracing.ts'

/** A traced request's server span, and the context its children start in. */
export interface RequestTrace {
  span: Span
  context: Context
}

declare module 'fastify' {
  interface FastifyRequest {
    /** The request's trace; null when tracing is off. */
    trace: RequestTrace | null
  }
}

/** At most this much of the User-Agent goes into a span. */
const USER_AGENT_LIMIT = 256

/** Starts each request's server span (first of the scope's onRequest hooks) and ends it with the response. */
export function installTracing (api: FastifyInstance, tracing: Tracing | undefined): void {
  api.decorateRequest('trace', null)
  if (!tracing) return
  api.addHook('onRequest', async (request: FastifyRequest, reply: FastifyReply) => {
    const parent = tracing.extract(request.headers)
    const route = request.routeOptions.url ?? 'unmatched'
    const span = tracing.tracer.startSpan(`${request.method} ${route}`, {
      kind: SpanKind.SERVER,
      attributes: {
        'http.request.method': request.method,
        'http.route': route,
        'client.address': request.ip,
        ...(request.headers['user-agent'] ? { 'user_agent.original': request.headers['user-agent'].slice(0, USER_AGENT_LIMIT) } : {}),
      },
    }, parent)
    request.trace = { span, context: trace.setSpan(parent, span) }
    // 'close' comes after the last byte, and also when the client leaves before it.
    reply.raw.once('close', () => {
      span.setAttribute('http.response.status_code', reply.statusCode)
      if (!reply.raw.writableFinished) span.setAttribute('chatd.client_left', true)
      if (reply.statusCode >= 500) span.setStatus({ code: SpanStatusCode.ERROR })
      span.end()
    })
  })
}

/** `hook` inside a span named `name` (a child of the request's), when the request is traced. */
export function traced (tracing: Tracing | undefined, name: string, hook: onRequestAsyncHookHandler): onRequestAsyncHookHandler {
  if (!tracing) return hook
  return async function tracedHook (request, reply) {
    const parent = request.trace
    if (!parent) return hook.call(this, request, reply)
    const span = tracing.tracer.startSpan(name, {}, parent.context)
    try {
      await hook.call(this, request, reply)
    } catch (err) {
      endFailed(span, err)
      throw err
    }
    span.end()
  }
}

/** Ends `span` as failed: its error.type is the API error code (never the message, which may echo input). */
export function endFailed (span: Span, err: unknown): void {
  endFailedWith(span, err instanceof ApiError ? err.code : 'internal_error')
}

export function endFailedWith (span: Span, code: string): void {
  span.setAttribute('error.type', code)
  span.setStatus({ code: SpanStatusCode.ERROR, message: code })
  span.end()
}
