// The first start on an empty database creates an admin account and its first
// key, so a fresh install can be called at once. The key is returned to be
// printed once by the caller; it is never logged.
//
// The admin is the operator, so it goes on the shipped `unlimited` tier rather
// than the 10-requests-a-minute free tier (if a custom tiers file has no such
// tier, the account falls back to the default tier; `chatd accounts set-tier`
// changes it).

import type { Accounts } from './accounts.ts'

export const ADMIN_TIER = 'unlimited'

export interface CreatedAdmin {
  email: string
  key: string
  /** True when the key came from CHATD_ADMIN_KEY rather than being drawn. */
  fromConfig: boolean
}

/**
 * Creates the admin account and its key when the database has no account.
 * `firstStart`: whether it had none when the start began (read before the
 * server listened); when given, it decides instead of a count taken now.
 */
export async function ensureAdminAccount (accounts: Accounts, opts: { email: string; key?: string; tier?: string; firstStart?: boolean }): Promise<CreatedAdmin | null> {
  if (opts.firstStart === false || (opts.firstStart === undefined && await accounts.count() > 0)) return null
  let account
  try {
    account = await accounts.create({ email: opts.email, isAdmin: true, tier: opts.tier ?? ADMIN_TIER })
  } catch (err) {
    // Several replicas starting on one empty database: one creates the admin, the others find it made.
    if (await accounts.findByEmail(opts.email)) return null
    throw err
  }
  const { key } = await accounts.createKey(account.id, { name: 'admin (first start)', key: opts.key })
  return { email: account.email, key, fromConfig: opts.key !== undefined }
}
