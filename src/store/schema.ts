// Row types of every table, as Kysely sees them. Timestamps are ISO-8601 text
// (UTC) so the same rows read identically from SQLite and PostgreSQL.

import type { Generated, Insertable, Selectable } from 'kysely'

export interface AccountsTable {
  id: Generated<number>
  email: string
  tier: Generated<string>
  /** SQLite hands booleans back as 0/1; read through Boolean(). */
  is_admin: Generated<boolean | number>
  /** Argon2id PHC string for dashboard log-in; null for accounts made without a password (CLI, first start). */
  password_hash: string | null
  created_at: string
  /**
   * SHA-256 (hex) of the email's confusable skeleton (unicode/email-identity.ts),
   * unique: no two accounts look alike. Null on an old account whose look-alike
   * was there first (migration 005).
   */
  email_skeleton: string | null
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

export interface SessionsTable {
  id: Generated<number>
  account_id: number
  /** Hex SHA-256 of the cookie's token; the token itself is only ever in the cookie. */
  token_hash: string
  created_at: string
  expires_at: string
}

export type UsageStatus = 'completed' | 'cancelled' | 'failed'

export interface UsageRecordsTable {
  id: Generated<number>
  account_id: number
  key_prefix: string
  model: string
  prompt_tokens: number
  completion_tokens: number
  status: UsageStatus
  /** The API error code of a failed request; null otherwise. */
  error_code: string | null
  latency_ms: number
  /** When the request ended. */
  created_at: string
  /** The chat completion's id (chatcmpl-…), unique; null on rows older than migration 003. */
  request_id: string | null
}

/** An account's usage on one UTC day (migration 007): its trigger adds each usage record inserted. */
export interface UsageDailyTable {
  account_id: number
  /** YYYY-MM-DD: the records' created_at's first 10 characters. */
  day: string
  /** Every call; the bigint columns read back as strings on PostgreSQL. */
  calls: number | string
  /** Completed and cancelled calls (BILLABLE_STATUSES). */
  billable_calls: number | string
  prompt_tokens: number | string
  completion_tokens: number | string
}

export interface SettingsTable {
  name: string
  value: string
}

export interface StoredResponsesTable {
  /** Insertion order; the per-account cap evicts the lowest. */
  seq: Generated<number>
  /** resp_…, as the client saw it. */
  id: string
  account_id: number
  /** The response this one continues; null for a conversation's first. */
  previous_response_id: string | null
  model: string
  /** When it was stored; the retention job removes rows past RESPONSES_RETENTION_DAYS. */
  created_at: string
  /** UTF-8 bytes of `response` + `input`. */
  bytes: number
  /** The response object, JSON, exactly as it was returned. */
  response: string
  /** That turn's input items (not the earlier turns'), a JSON array. */
  input: string
}

export interface Database {
  accounts: AccountsTable
  api_keys: ApiKeysTable
  sessions: SessionsTable
  usage_records: UsageRecordsTable
  usage_daily: UsageDailyTable
  settings: SettingsTable
  stored_responses: StoredResponsesTable
}

export type AccountRow = Selectable<AccountsTable>
export type ApiKeyRow = Selectable<ApiKeysTable>
export type NewUsageRecordRow = Insertable<UsageRecordsTable>
export type StoredResponseRow = Selectable<StoredResponsesTable>
