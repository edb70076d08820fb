// Whose prefix cache a request may reuse (GenerateRequest.cacheScope): the
// authenticated account, split further by the request's cache_salt. The server
// sets it; a client can only narrow its own account's scope with a salt, never
// name another's. The engine sees an opaque digest: neither the account id nor
// the salt travels further.
import { createHash } from 'node:crypto'

/** The cache scope of `accountId`'s requests with `salt` (none: the account's unsalted scope). */
export function cacheScope (accountId: number, salt?: string): string {
  return createHash('sha256').update(JSON.stringify([accountId, salt ?? null])).digest('base64url')
}
