// Row types of every table, as Kysely sees them. Timestamps are ISO-8601 text
// (UTC) so the same rows read identically from SQLite and PostgreSQL.

import type { Generated, Insertable, Selectable } from 'kysely'

export interface AccountsTable {
  id: Generated<number>
  email: string
  tier: Generated<string>
  /** SQLite hands booleans back as 0/1; read through Boolean(). */
  is_admin: Generated<boolean | number>
  /** Set by the dashboard issue (password log-in); null for API-only accounts. */
  password_hash: string | null
  created_at: string
}

export interface ApiKeysTable {
  id: Generated<number>
  account_id: number
  name: string | null
  /** `sk-chatd-` + the first 6 random characters: how people and the CLI name a key. */
  prefix: string
  /** Hex SHA-256 of the whole key; the key itself is never stored. */
  hash: string
  created_at: string
  last_used_at: string | null
  revoked_at: string | null
}

export interface Database {
  accounts: AccountsTable
  api_keys: ApiKeysTable
}

export type AccountRow = Selectable<AccountsTable>
export type NewAccountRow = Insertable<AccountsTable>
export type ApiKeyRow = Selectable<ApiKeysTable>
