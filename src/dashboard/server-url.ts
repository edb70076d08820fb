// The address clients reach this server at, for the examples the pages show:
// the scheme and host the browser used. Behind a reverse proxy they come from
// X-Forwarded-Proto / X-Forwarded-Host, which Fastify believes only from the
// proxies TRUST_PROXY names (request.protocol and request.host do that);
// without TRUST_PROXY a TLS proxy's clients would be shown http://.

import type { FastifyRequest } from 'fastify'

/** A host name, IPv4 address or bracketed IPv6 address, with an optional port: nothing a shell, TOML or HTML reads specially. */
const HOST = /^(?:[A-Za-z0-9_](?:[A-Za-z0-9_.-]{0,252})|\[[0-9A-Fa-f:.]{2,45}\])(?::[0-9]{1,5})?$/

/**
 * `http(s)://host[:port]`, or undefined when the request's Host (or a trusted
 * proxy's X-Forwarded-Host) is not an address: a page then shows no example
 * rather than one built around whatever a client put there.
 */
export function serverUrl (request: FastifyRequest): string | undefined {
  const { protocol, host } = request
  if ((protocol !== 'http' && protocol !== 'https') || !HOST.test(host)) return undefined
  return `${protocol}://${host}`
}
