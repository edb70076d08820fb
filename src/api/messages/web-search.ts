// The web_search server tool of a Messages request (web_search_20250305 and
// later versions): its fields checked, and what chatd does with them. max_uses
// lowers the reply's bound on searches (never above SEARCHES_MAX);
// allowed_domains / blocked_domains filter the provider's results by host
// (a domain covers its subdomains; "example.com/blog" also needs the path to
// start there), since not every provider can restrict a search itself.
// user_location is accepted and not used.

import { invalidParam } from '../../errors.ts'
import type { SearchResult } from '../../search/provider.ts'
import { SEARCHES_MAX } from '../pipeline/hosted-search.ts'

/** Domains a filter may list. */
export const DOMAINS_MAX = 100
/** The longest domain (with a path) accepted. */
const DOMAIN_CHARS_MAX = 512

export interface WebSearchPlan {
  maxUses: number
  /** Absent: every result is kept. */
  keep?: (result: SearchResult) => boolean
}

/** The web_search server tool (web_search_20250305 and later versions). */
export function isWebSearch (tool: { type?: string }): boolean {
  return tool.type?.startsWith('web_search_') === true
}

interface DomainRule { host: string; path: string }

function domainRules (value: unknown, at: string): DomainRule[] | undefined {
  if (value === undefined || value === null) return undefined
  if (!Array.isArray(value)) throw invalidParam(at, `${at} must be an array of domains.`)
  if (value.length > DOMAINS_MAX) throw invalidParam(at, `${at} lists ${value.length} domains; at most ${DOMAINS_MAX} are accepted.`)
  return value.map((entry: unknown, k) => {
    const where = `${at}[${k}]`
    if (typeof entry !== 'string' || entry.length === 0 || entry.length > DOMAIN_CHARS_MAX) {
      throw invalidParam(where, `${where} must be a domain of 1 to ${DOMAIN_CHARS_MAX} characters.`)
    }
    if (entry.includes('://')) throw invalidParam(where, `${where} must be a domain without a scheme, like "example.com".`)
    const slash = entry.indexOf('/')
    const host = (slash < 0 ? entry : entry.slice(0, slash)).toLowerCase().replace(/\.$/, '')
    if (host === '' || !/^[a-z0-9.-]+$/.test(host)) throw invalidParam(where, `${where}: '${entry.slice(0, 64)}' is not a domain.`)
    return { host, path: slash < 0 ? '' : entry.slice(slash) }
  })
}

function matches (rules: DomainRule[], url: string): boolean {
  let parsed: URL
  try {
    parsed = new URL(url)
  } catch {
    return false
  }
  const host = parsed.hostname.toLowerCase()
  return rules.some(rule => (host === rule.host || host.endsWith(`.${rule.host}`)) && parsed.pathname.startsWith(rule.path))
}

/** The plan for the web_search tool at `tools[index]`; a 400 naming the field at fault. */
export function webSearchPlan (tool: Record<string, unknown>, index: number): WebSearchPlan {
  const at = `tools[${index}]`
  const maxUses = tool.max_uses
  if (maxUses !== undefined && maxUses !== null && (typeof maxUses !== 'number' || !Number.isInteger(maxUses) || maxUses < 1)) {
    throw invalidParam(`${at}.max_uses`, `${at}.max_uses must be a positive integer.`)
  }
  const allowed = domainRules(tool.allowed_domains, `${at}.allowed_domains`)
  const blocked = domainRules(tool.blocked_domains, `${at}.blocked_domains`)
  if (allowed !== undefined && blocked !== undefined) {
    throw invalidParam(`${at}.blocked_domains`, `${at}.blocked_domains: use either allowed_domains or blocked_domains, not both.`)
  }
  const plan: WebSearchPlan = { maxUses: Math.min(typeof maxUses === 'number' ? maxUses : SEARCHES_MAX, SEARCHES_MAX) }
  if (allowed !== undefined) plan.keep = result => matches(allowed, result.url)
  else if (blocked !== undefined) plan.keep = result => !matches(blocked, result.url)
  return plan
}
