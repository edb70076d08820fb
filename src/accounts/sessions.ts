// Dashboard sessions, kept in the database so every replica honours them and
// logging out (or changing the password) ends them everywhere at once. The
// cookie holds a random 256-bit token; the table holds only its SHA-256, like
// API keys, so reading the table gives nobody a working cookie.

import { createHash, randomBytes } from 'node:crypto'
import type { Db } from '../store/database.ts'
import type { Account } from './accounts.ts'
import { toAccount } from './accounts.ts'

export const SESSION_TTL_MS = 7 * 24 * 3600 * 1000
/**
 * The most sessions one account holds: a log-in past it ends the account's oldest. Log-ins are
 * throttled per client address only, so without it one account's scripted log-ins from many
 * addresses would each leave a row for a week.
 */
export const SESSIONS_PER_ACCOUNT = 50

const hashToken = (token: string): string => createHash('sha256').update(token).digest('hex')

export class Sessions {
  readonly #db: Db
  readonly #ttlMs: number
  readonly #perAccount: number

  constructor (db: Db, opts: { ttlMs?: number; perAccount?: number } = {}) {
    this.#db = db
    this.#ttlMs = opts.ttlMs ?? SESSION_TTL_MS
    this.#perAccount = opts.perAccount ?? SESSIONS_PER_ACCOUNT
  }

  get ttlMs (): number {
    return this.#ttlMs
  }

  /** Starts a session; the returned token goes in the cookie and nowhere else. */
  async create (accountId: number): Promise<string> {
    const token = randomBytes(32).toString('base64url')
    const now = Date.now()
    await this.#db.insertInto('sessions').values({
      account_id: accountId,
      token_hash: hashToken(token),
      created_at: new Date(now).toISOString(),
      expires_at: new Date(now + this.#ttlMs).toISOString(),
    }).execute()
    await this.#endOldest(accountId)
    return token
  }

  /** Ends the account's sessions older than its newest `perAccount` (ids grow with each one made). */
  async #endOldest (accountId: number): Promise<void> {
    const oldestKept = await this.#db.selectFrom('sessions').select('id')
      .where('account_id', '=', accountId)
      .orderBy('id', 'desc').limit(1).offset(this.#perAccount - 1)
      .executeTakeFirst()
    if (oldestKept) await this.#db.deleteFrom('sessions').where('account_id', '=', accountId).where('id', '<', oldestKept.id).execute()
  }

  /** The account a live session token belongs to; undefined for unknown or expired tokens. */
  async account (token: string): Promise<Account | undefined> {
    if (!/^[A-Za-z0-9_-]{43}$/.test(token)) return undefined
    const row = await this.#db.selectFrom('sessions')
      .innerJoin('accounts', 'accounts.id', 'sessions.account_id')
      .selectAll('accounts')
      .select('sessions.expires_at')
      .where('sessions.token_hash', '=', hashToken(token))
      .executeTakeFirst()
    if (!row || row.expires_at <= new Date().toISOString()) return undefined
    return toAccount(row)
  }

  async end (token: string): Promise<void> {
    await this.#db.deleteFrom('sessions').where('token_hash', '=', hashToken(token)).execute()
  }

  /** Ends every session of the account (after a password change), except `keep` when given. */
  async endAll (accountId: number, opts: { keep?: string } = {}): Promise<void> {
    let query = this.#db.deleteFrom('sessions').where('account_id', '=', accountId)
    if (opts.keep !== undefined) query = query.where('token_hash', '!=', hashToken(opts.keep))
    await query.execute()
  }

  /** Drops expired rows; called now and then so the table does not grow forever. */
  async prune (): Promise<number> {
    const result = await this.#db.deleteFrom('sessions').where('expires_at', '<=', new Date().toISOString()).executeTakeFirst()
    return Number(result.numDeletedRows)
  }
}
