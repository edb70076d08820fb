// What chatd's logs may hold: the logger options buildApp uses. Credentials
// never reach a log line, whatever the level (trace included):
// - header paths that carry them are replaced by pino's redaction;
// - a request's URL is logged with its query values replaced, because a
//   client may put a key or token in a query string (chatd reads keys only
//   from the Authorization header, but the request line is logged before
//   that is checked);
// - last, every line is scanned as it is written and anything shaped like a
//   chatd key is cut to its display prefix, wherever it came from: a key sent
//   as a model id or inside a malformed JSON body comes back in an error
//   message, and error messages are logged.

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

/** A log line with every chatd key in it cut to its display prefix (the replacement keeps the JSON valid). */
export function maskApiKeys (line: string): string {
  return line.replace(CHATD_KEY, '$1…')
}

/** The request URL as logs show it: the path, and the query's parameter names with their values replaced. */
export function loggableUrl (url: string): string {
  const question = url.indexOf('?')
  if (question === -1) return url
  // Names stay (they say what the client sent); values do not.
  const names = url.slice(question + 1).split('&').filter(Boolean).map(pair => pair.split('=')[0])
  return `${url.slice(0, question)}?${names.map(name => `${name}=[Redacted]`).join('&')}`
}

/**
 * Fastify's own request serializer, with the URL made loggable. Pino applies
 * it to any `req` a log call passes, not only Fastify's requests, so it takes
 * whatever it gets and never throws.
 */
function loggableRequest (request: Partial<FastifyRequest>): Record<string, unknown> {
  return {
    method: request.method,
    url: typeof request.url === 'string' ? loggableUrl(request.url) : undefined,
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
    hooks: { streamWrite: maskApiKeys },
    ...(stream ? { stream } : {}),
  }
}
