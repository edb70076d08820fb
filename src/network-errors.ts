// Naming network failures for messages, the same way for every outbound HTTP
// client chatd has (upstream models, web search), without the addresses the
// errors carry.

/** A short, address-free name for a network failure. */
export function networkCause (err: unknown): string {
  const code = (err as { code?: string })?.code
  switch (code) {
    case 'ECONNREFUSED': return 'connection refused'
    case 'ECONNRESET': case 'UND_ERR_SOCKET': return 'connection reset'
    case 'ENOTFOUND': case 'EAI_AGAIN': return 'host not found'
    case 'UND_ERR_CONNECT_TIMEOUT': return 'connect timeout'
    case 'UND_ERR_HEADERS_TIMEOUT': case 'UND_ERR_BODY_TIMEOUT': return 'timed out'
    case 'CERT_HAS_EXPIRED': case 'DEPTH_ZERO_SELF_SIGNED_CERT': case 'UNABLE_TO_VERIFY_LEAF_SIGNATURE': return 'TLS certificate rejected'
    default: return code ? code.toLowerCase().replace(/^und_err_/, '').replaceAll('_', ' ') : 'network error'
  }
}
