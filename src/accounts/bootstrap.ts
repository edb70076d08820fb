// The first start on an empty database creates an admin account and its first
// key, so a fresh install can be called at once. The key is returned to be
// printed once by the caller; it is never logged.

import type { Accounts } from './accounts.ts'

export interface CreatedAdmin {
  email: string
  key: string
  /** True when the key came from CHATD_ADMIN_KEY rather than being drawn. */
  fromConfig: boolean
}

export async function ensureAdminAccount (accounts: Accounts, opts: { email: string; key?: string }): Promise<CreatedAdmin | null> {
  if (await accounts.count() > 0) return null
  const account = await accounts.create({ email: opts.email, isAdmin: true })
  const { key } = await accounts.createKey(account.id, { name: 'admin (first start)', key: opts.key })
  return { email: account.email, key, fromConfig: opts.key !== undefined }
}
