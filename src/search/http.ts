// GET a provider's JSON over undici. Failures become SearchProviderErrors whose
// messages name only the provider and what went wrong (never the URL, which
// carries Google's key in its query string and a SearXNG's private address).

import { request } from 'undici'
import { networkCause } from '../network-errors.ts'
import { SearchProviderError } from './provider.ts'

/** Larger replies are not search results pages. */
const MAX_BODY_BYTES = 4 * 1024 * 1024

export async function getJson (provider: string, url: URL, headers: Record<string, string>, signal: AbortSignal): Promise<unknown> {
  let response: Awaited<ReturnType<typeof request>>
  try {
    response = await request(url, { method: 'GET', headers: { accept: 'application/json', ...headers }, signal })
  } catch (err) {
    if (signal.aborted) throw signal.reason
    throw new SearchProviderError('unreachable', `${provider} could not be reached (${networkCause(err)})`)
  }
  const { statusCode, body } = response
  try {
    if (statusCode < 200 || statusCode > 299) {
      const hint = provider === 'searxng' && statusCode === 403 ? '; is the json format enabled in its settings.yml?' : ''
      throw new SearchProviderError('status', `${provider} answered HTTP ${statusCode}${hint}`)
    }
    let size = 0
    const parts: Buffer[] = []
    for await (const chunk of body) {
      size += (chunk as Buffer).length
      if (size > MAX_BODY_BYTES) throw new SearchProviderError('unreadable', `${provider} sent a reply larger than ${MAX_BODY_BYTES} bytes`)
      parts.push(chunk as Buffer)
    }
    try {
      return JSON.parse(Buffer.concat(parts).toString('utf8'))
    } catch {
      throw new SearchProviderError('unreadable', `${provider} sent a reply that is not JSON`)
    }
  } catch (err) {
    if (signal.aborted && !(err instanceof SearchProviderError)) throw signal.reason
    if (err instanceof SearchProviderError) throw err
    throw new SearchProviderError('unreachable', `${provider} broke off its reply (${networkCause(err)})`)
  } finally {
    // Destroying an unread body makes undici emit an abort error; nobody is listening any more.
    body.on('error', () => {})
    body.destroy()
  }
}

/** A string field of a result, or ''. */
export function text (value: unknown): string {
  return typeof value === 'string' ? value : ''
}

/** Snippets arrive with HTML highlighting (<strong>, &amp;); the model gets plain text. */
export function plainText (html: string): string {
  return html
    .replace(/<[^>]*>/g, '')
    .replace(/&(amp|lt|gt|quot|#39|#x27|nbsp);/g, (_, e: string) => ({ amp: '&', lt: '<', gt: '>', quot: '"', '#39': "'", '#x27': "'", nbsp: ' ' })[e] ?? '')
    .replace(/\s+/g, ' ')
    .trim()
}
