// What chatd's logs may hold: the logger options buildApp uses. Credentials
// never reach a log line, whatever the level (trace included):
// - header paths that carry them are replaced by pino's redaction;
// - a request's URL is logged with its query values replaced, because a
//   client may put a key or token in a query string (chatd reads keys only
//   from the Authorization header, but the request line is logged before
//   that is checked), and with every path segment that looks like a secret
//   (once percent-decoded) replaced too;
// - last, every line is scanned as it is written and anything shaped like a
//   chatd key is cut to its display prefix, wherever it came from: a key sent
//   as a model id or inside a malformed JSON body comes back in an error
//   message, and error messages are logged. Percent-encoded text is decoded
//   for that scan, so sk-chatd-AbC%44ef... is found as well.

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
/** The same, for a yes or no. */
const HAS_CHATD_KEY = /sk-chatd-[A-Za-z0-9]{7}/

/** A run of URL characters holding at least one percent-escape. */
const ENCODED_RUN = /[A-Za-z0-9%._~+-]*%[0-9A-Fa-f]{2}[A-Za-z0-9%._~+-]*/g

/**
 * Percent-decoded, as often as it still changes (up to 4 rounds: a key
 * encoded twice is still a key). Never throws: an escape that is not UTF-8
 * decodes byte by byte.
 */
export function percentDecode (text: string): string {
  let out = text
  for (let round = 0; round < 4 && out.includes('%'); round++) {
    const next = out.replace(/(?:%[0-9A-Fa-f]{2})+/g, run => {
      try {
        return decodeURIComponent(run)
      } catch {
        return run.replace(/%([0-9A-Fa-f]{2})/g, (_, hex: string) => String.fromCharCode(parseInt(hex, 16)))
      }
    })
    if (next === out) break
    out = next
  }
  return out
}

/** An encoded run as the log shows it: the decoded key cut to its prefix, or the run itself when it holds no key. */
function maskEncodedRun (run: string): string {
  const decoded = percentDecode(run)
  if (!HAS_CHATD_KEY.test(decoded)) return run
  const masked = decoded.replace(CHATD_KEY, '$1…')
  // Decoded text goes into a JSON line: only if it cannot break the line's syntax.
  return /^[\x20-\x7e…]*$/.test(masked) && !/["\\]/.test(masked) ? masked : '[Redacted]'
}

/** A log line with every chatd key in it cut to its display prefix, percent-encoded ones too (the replacement keeps the JSON valid). */
export function maskApiKeys (line: string): string {
  const masked = line.replace(CHATD_KEY, '$1…')
  return masked.includes('%') ? masked.replace(ENCODED_RUN, maskEncodedRun) : masked
}

/** 20+ letters and digits in a row, both kinds present: a key, a token, a hash; not a word or a model id. */
const SECRET_RUN = /[A-Za-z0-9]{20,}/g

/**
 * Whether text looks like it holds a secret: a chatd key, or a long run of
 * letters and digits (other providers' keys, tokens, hashes). Model ids and
 * words break into short runs at their dashes and dots.
 */
export function looksSecret (text: string): boolean {
  if (HAS_CHATD_KEY.test(text)) return true
  return (text.match(SECRET_RUN) ?? []).some(run => /[0-9]/.test(run) && /[A-Za-z]/.test(run))
}

/** Free text (an error message echoing a model id) with every secret-looking run replaced. */
export function redactSecretLooking (text: string): string {
  return maskApiKeys(text).replace(SECRET_RUN, run => /[0-9]/.test(run) && /[A-Za-z]/.test(run) ? '[Redacted]' : run)
}

/**
 * The request URL as logs show it: the path, with each segment that looks
 * like a secret once percent-decoded replaced, and the query's parameter
 * names with their values replaced.
 */
export function loggableUrl (url: string): string {
  const question = url.indexOf('?')
  const path = (question === -1 ? url : url.slice(0, question))
    .split('/').map(segment => looksSecret(percentDecode(segment)) ? '[Redacted]' : segment).join('/')
  if (question === -1) return path
  // Names stay (they say what the client sent); values do not.
  const names = url.slice(question + 1).split('&').filter(Boolean).map(pair => pair.split('=')[0])
  return `${path}?${names.map(name => looksSecret(percentDecode(name)) ? '[Redacted]' : name).map(name => `${name}=[Redacted]`).join('&')}`
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
