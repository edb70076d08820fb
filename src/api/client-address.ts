// The client a connection or a refused request is counted against (the per-address connection
// cap, the refusal meter): its address, and for IPv6 its /64. A host is given a whole /64 and may
// send from any address in it, so counting each address alone would let one host multiply a
// per-address bound by the addresses it uses. An IPv4 address mapped into IPv6 (a dual-stack
// listener's `::ffff:a.b.c.d`) is its IPv4 address. @fastify/rate-limit's normalizeIP does it, as
// its own per-address limits (the dashboard's log-in throttle) count.

import { normalizeIP } from '@fastify/rate-limit'

export function clientKey (address: string): string {
  try {
    return normalizeIP(address)
  } catch {
    // Also called in the server's connection listener, where a throw would end the process: an
    // address the parser cannot read (none is known) is counted as it is.
    return address
  }
}
