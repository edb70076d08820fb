// What chatd's logs may hold: the logger options buildApp uses. Credentials
// never reach a log line, whatever the level (trace included):
// - header paths that carry them are replaced by pino's redaction;
// - a request's URL is logged with its query values replaced, because a
//   client may put a key in a query string (chatd reads keys only from the
//   Authorization header, but the request line is logged before that is
//   checked), and with anything shaped like a chatd key cut to its display
//   prefix, wherever in the path it was sent.

import type { FastifyRequest, FastifyServerOptions } from 'fastify'

/** Log paths that may hold credentials; pino replaces them with [Redacted]. */
export const REDACTED_PATHS = [
  'req.headers.authorization',
  'req.headers.cookie',
  'req.headers["x-api-key"]',
  'headers.authorization',
  'headers.cookie',
  'headers["x-api-key"]',
  'res.headers["set-cookie"]',
  'key',
  'apiKey',
  'password',
  'token',
]

/** A chatd key's display prefix (sk-chatd- + 6) and the secret rest, which is cut. */
const CHATD_KEY = /(sk-chatd-[A-Za-z0-9]{6})[A-Za-z0-9]+/g

/** The request URL as logs show it: query values replaced, key-shaped text cut to its prefix. */
export function loggableUrl (url: string): string {
  const question = url.indexOf('?')
  const path = (question === -1 ? url : url.slice(0, question)).replace(CHATD_KEY, '$1…')
  if (question === -1) return path
  // Parameter names stay (they say what the client sent); their values do not.
  const names = url.slice(question + 1).split('&').filter(Boolean).map(pair => pair.split('=')[0].replace(CHATD_KEY, '$1…'))
  return `${path}?${names.map(name => `${name}=[Redacted]`).join('&')}`
}

/** Fastify's own request serializer, with the URL made loggable. */
function loggableRequest (request: FastifyRequest): Record<string, unknown> {
  return {
    method: request.method,
    url: loggableUrl(request.url),
    version: request.headers?.['accept-version'],
    host: request.host,
    remoteAddress: request.ip,
    remotePort: request.socket?.remotePort,
  }
}

export function loggerOptions (level: string, stream?: NodeJS.WritableStream): FastifyServerOptions['logger'] {
  return {
    level,
    redact: REDACTED_PATHS,
    serializers: { req: loggableRequest as (req: unknown) => Record<string, unknown> },
    ...(stream ? { stream } : {}),
  }
}
