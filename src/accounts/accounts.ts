// Accounts and their API keys over the store: create, look up, list, revoke,
// and authenticate a presented key; passwords and tiers for the dashboard.
// Everything the CLI, the auth hook and the dashboard need.

import { sql } from 'kysely'
import type { KeyAllowance } from '../config.ts'
import type { Db } from '../store/database.ts'
import type { AccountRow, ApiKeyRow } from '../store/schema.ts'
import { apiKeyPrefix, generateApiKey, hashApiKey, isWellFormedApiKey, sameHash } from './api-key-format.ts'
import { emailSkeletonKey, mixesScripts } from '../unicode/email-identity.ts'
import { hashPassword, passwordProblem, verifyPassword } from './passwords.ts'

export interface Account {
  id: number
  email: string
  tier: string
  isAdmin: boolean
  createdAt: string
}

export interface ApiKeyInfo {
  id: number
  name: string | null
  prefix: string
  createdAt: string
  lastUsedAt: string | null
  revokedAt: string | null
}

/** What `revokeByKeyOrPrefix` did: the key it found names itself by prefix and account. */
export type Revocation =
  | { outcome: 'revoked'; prefix: string; email: string }
  | { outcome: 'already'; prefix: string; email: string; revokedAt: string }
  | { outcome: 'unknown'; by: 'key' | 'prefix' }

export type Authentication =
  | { ok: true; account: Account; keyId: number; keyPrefix: string }
  | { ok: false; reason: 'malformed' | 'unknown' | 'revoked' }

export class AccountError extends Error {
  constructor (message: string, opts?: ErrorOptions) {
    super(message, opts)
    this.name = 'AccountError'
  }
}

/** A key refused by the account's allowance: 409 when it holds too many, 429 when it made too many today. */
export class KeyAllowanceError extends AccountError {
  readonly statusCode: 409 | 429
  constructor (message: string, statusCode: 409 | 429) {
    super(message)
    this.name = 'KeyAllowanceError'
    this.statusCode = statusCode
  }
}

/** A page of the accounts (the admin page) and how many match in all. */
export interface AccountPage {
  accounts: Account[]
  total: number
}

/** The dashboard's list of an account's keys: every active one and the latest revoked ones, newest first. */
export interface KeyListing {
  keys: ApiKeyInfo[]
  /** Revoked keys older than those listed. */
  olderRevoked: number
}

/** The refusal of an address confusable with an existing account's; `existing` only for the operator. */
function lookalikeMessage (existing: string | undefined): string {
  return 'this email address looks like that of an existing account (the same letters from another script, or accents added); choose another' +
    (existing === undefined ? '' : `: it looks like ${existing}`)
}

export function toAccount (row: Pick<AccountRow, 'id' | 'email' | 'tier' | 'is_admin' | 'created_at'>): Account {
  return { id: row.id, email: row.email, tier: row.tier, isAdmin: Boolean(row.is_admin), createdAt: row.created_at }
}

function toKeyInfo (row: ApiKeyRow): ApiKeyInfo {
  return { id: row.id, name: row.name, prefix: row.prefix, createdAt: row.created_at, lastUsedAt: row.last_used_at, revokedAt: row.revoked_at }
}

const now = (): string => new Date().toISOString()

const DAY_MS = 24 * 3600 * 1000

/**
 * How stale a key's last_used_at may get. Writing it on every request cost a
 * synchronous, fsynced SQLite commit on the main thread per request (about
 * 8 ms on the CI disk): under load that, not the model, capped the server and
 * delayed every stream. "Last used" to the minute is what the CLI and the
 * dashboard show.
 */
const LAST_USED_RESOLUTION_MS = 60_000

/** The longest email address accepted, in characters (RFC 5321's 256-octet path less its brackets). */
export const MAX_EMAIL_LENGTH = 254

/**
 * An email as chatd stores and compares it: NFKC (full-width letters and
 * other compatibility forms become the plain ones they look like), trimmed,
 * lower-case, so look-alikes and case variants are the same account.
 */
export function normalizeEmail (email: string): string {
  return email.normalize('NFKC').trim().toLowerCase().normalize('NFKC')
}

/** How emails were stored before they were NFKC-normalised; a few old rows may still hold that form (migration 004). */
function legacyEmail (email: string): string {
  return email.trim().toLowerCase()
}

/**
 * Characters no email address may hold: controls (NUL included), format
 * characters (zero-width spaces and joiners, bidi overrides), other
 * invisible ones, and whitespace. With them an address could look exactly
 * like another one on the admin page.
 */
const INVISIBLE = /[\p{Cc}\p{Cf}\p{Co}\p{Cs}\p{Zl}\p{Zp}\p{Default_Ignorable_Code_Point}\s]/u

/** What is wrong with a (normalised) email address for a new account; undefined when nothing is. */
export function emailProblem (email: string): string | undefined {
  // Code points, as the database's varchar counts them.
  if ([...email].length > MAX_EMAIL_LENGTH) return `an email address has at most ${MAX_EMAIL_LENGTH} characters`
  if (INVISIBLE.test(email)) return 'an email address cannot hold spaces, control characters or invisible characters'
  if (!/^[^@]+@[^@]+$/.test(email)) return 'not an email address'
  if (mixesScripts(email)) return 'an email address cannot mix scripts within its name or a part of its domain (such as a Cyrillic or Greek letter among Latin ones)'
  return undefined
}

/** Whether a database error is a unique constraint refusing a row (SQLite or PostgreSQL). */
function isUniqueViolation (err: unknown): boolean {
  const e = err as { code?: string; errcode?: string; message?: string }
  return e.code === '23505' || e.errcode === '23505' || /UNIQUE constraint failed/.test(e.message ?? '')
}

export class Accounts {
  readonly #db: Db

  constructor (db: Db) {
    this.#db = db
  }

  /** The store these accounts live in, for the collaborators that share it (sessions, usage records). */
  get database (): Db {
    return this.#db
  }

  async count (): Promise<number> {
    const { n } = await this.#db.selectFrom('accounts').select(eb => eb.fn.countAll<number>().as('n')).executeTakeFirstOrThrow()
    return Number(n)
  }

  /**
   * `operator`: the caller is the operator (the CLI), who may be told which
   * existing account a refused look-alike resembles; registration is not.
   */
  async create (opts: { email: string; tier?: string; isAdmin?: boolean; operator?: boolean }): Promise<Account> {
    const email = normalizeEmail(opts.email)
    // The message never repeats what was typed: it may be a password in the wrong field.
    const problem = emailProblem(email)
    if (problem) throw new AccountError(problem)
    if (await this.findByEmail(email)) throw new AccountError(`an account with email ${email} already exists`)
    // An address that looks like an existing account's (UTS #39 skeleton): one indexed lookup.
    const skeleton = emailSkeletonKey(email)
    const lookalike = await this.#db.selectFrom('accounts').select('email').where('email_skeleton', '=', skeleton).executeTakeFirst()
    if (lookalike) throw new AccountError(lookalikeMessage(opts.operator ? lookalike.email : undefined))
    try {
      const row = await this.#db.insertInto('accounts')
        .values({ email, email_skeleton: skeleton, tier: opts.tier ?? 'free', is_admin: opts.isAdmin ?? false, password_hash: null, created_at: now() })
        .returningAll()
        .executeTakeFirstOrThrow()
      return toAccount(row)
    } catch (err) {
      // Made at the same moment by another request (or replica): the unique columns decide.
      if (isUniqueViolation(err)) throw new AccountError(lookalikeMessage(undefined), { cause: err })
      throw err
    }
  }

  /** Registration from the dashboard: an account with a password, on the default tier. */
  async register (opts: { email: string; password: string; tier?: string }): Promise<Account> {
    const problem = passwordProblem(opts.password)
    if (problem) throw new AccountError(problem)
    const account = await this.create({ email: opts.email, tier: opts.tier })
    await this.setPassword(account.id, opts.password)
    return account
  }

  async setPassword (accountId: number, password: string): Promise<void> {
    const problem = passwordProblem(password)
    if (problem) throw new AccountError(problem)
    await this.#db.updateTable('accounts').set({ password_hash: await hashPassword(password) }).where('id', '=', accountId).execute()
  }

  /**
   * The account whose email and password these are, or undefined. Unknown
   * emails and accounts without a password take as long as a wrong password,
   * so the answer's timing does not tell which emails exist.
   */
  async verifyLogin (email: string, password: string): Promise<Account | undefined> {
    const row = await this.#rowByEmail(email)
    const ok = await verifyPassword(row?.password_hash ?? null, password)
    return ok && row ? toAccount(row) : undefined
  }

  async setTier (accountId: number, tier: string): Promise<void> {
    await this.#db.updateTable('accounts').set({ tier }).where('id', '=', accountId).execute()
  }

  /**
   * Deletes the account and everything it holds: its keys (which stop authenticating at once),
   * sessions, usage records and day totals, and stored responses, all by the database's cascades
   * in one statement. Ids are never reused (SQLite AUTOINCREMENT, PostgreSQL serial), so nothing
   * kept under the old id (a prefix cache scope, a limit counter) reaches a later account.
   * Returns false when there is no such account.
   */
  async delete (accountId: number): Promise<boolean> {
    const result = await this.#db.deleteFrom('accounts').where('id', '=', accountId).executeTakeFirst()
    return Number(result.numDeletedRows) > 0
  }

  async findById (id: number): Promise<Account | undefined> {
    const row = await this.#db.selectFrom('accounts').selectAll().where('id', '=', id).executeTakeFirst()
    return row && toAccount(row)
  }

  /** Every account, oldest first, for the admin page and `chatd accounts list`. */
  async list (): Promise<Account[]> {
    const rows = await this.#db.selectFrom('accounts').selectAll().orderBy('id').execute()
    return rows.map(toAccount)
  }

  /**
   * One page of accounts in the order they were made, and how many there are: those whose
   * email holds `emailHas` (compared as emails are stored, NFKC and lower case), or all.
   */
  async listPage (opts: { offset: number; limit: number; emailHas?: string }): Promise<AccountPage> {
    let query = this.#db.selectFrom('accounts')
    if (opts.emailHas) {
      // LIKE's own wildcards in the text are taken literally.
      const pattern = `%${normalizeEmail(opts.emailHas).replace(/[\\%_]/g, c => `\\${c}`)}%`
      query = query.where(sql<boolean>`email like ${pattern} escape '\\'`)
    }
    const [rows, total] = await Promise.all([
      query.selectAll().orderBy('id').offset(opts.offset).limit(opts.limit).execute(),
      query.select(eb => eb.fn.countAll().as('n')).executeTakeFirstOrThrow(),
    ])
    return { accounts: rows.map(toAccount), total: Number(total.n) }
  }

  async findByEmail (email: string): Promise<Account | undefined> {
    const row = await this.#rowByEmail(email)
    return row && toAccount(row)
  }

  /**
   * The account of an email: an old row stored exactly as typed (trimmed and
   * lower-cased, as emails were before normalisation; migration 004 leaves
   * such a row when its normalised form was taken), else the normalised form.
   */
  async #rowByEmail (email: string): Promise<AccountRow | undefined> {
    const normalized = normalizeEmail(email)
    const typed = legacyEmail(email)
    const rows = await this.#db.selectFrom('accounts').selectAll().where('email', 'in', [...new Set([typed, normalized])]).execute()
    return rows.find(r => r.email === typed) ?? rows.find(r => r.email === normalized)
  }

  async getByEmail (email: string): Promise<Account> {
    const account = await this.findByEmail(email)
    if (!account) throw new AccountError(`no account with email ${normalizeEmail(email)}`)
    return account
  }

  /**
   * Creates a key for the account and returns it in full: the only time it is
   * ever visible. `key` lets the first start use CHATD_ADMIN_KEY. With
   * `allowance` (the dashboard; the operator's CLI has none) it is refused when
   * the account already holds or has lately made as many as allowed. Two
   * requests at the same instant may both pass the count: the bound can be
   * passed by the account's concurrent requests, never grown without end.
   */
  async createKey (accountId: number, opts: { name?: string; key?: string; allowance?: KeyAllowance } = {}): Promise<{ key: string; info: ApiKeyInfo }> {
    if (opts.key !== undefined && !isWellFormedApiKey(opts.key)) throw new AccountError('an API key must be sk-chatd- followed by 32 letters or digits')
    if (opts.allowance) await this.#checkAllowance(accountId, opts.allowance)
    for (let attempt = 0; ; attempt++) {
      const key = opts.key ?? generateApiKey()
      const prefix = apiKeyPrefix(key)
      const taken = await this.#db.selectFrom('api_keys').select('id').where('prefix', '=', prefix).executeTakeFirst()
      if (taken) {
        // Prefixes are 6 base62 characters, so a clash is rare; draw again.
        if (opts.key !== undefined || attempt >= 5) throw new AccountError(`a key with prefix ${prefix} already exists`)
        continue
      }
      const row = await this.#db.insertInto('api_keys')
        .values({ account_id: accountId, name: opts.name ?? null, prefix, hash: hashApiKey(key), created_at: now(), last_used_at: null, revoked_at: null })
        .returningAll()
        .executeTakeFirstOrThrow()
      return { key, info: toKeyInfo(row) }
    }
  }

  async #checkAllowance (accountId: number, allowance: KeyAllowance): Promise<void> {
    const keys = this.#db.selectFrom('api_keys').where('account_id', '=', accountId)
    const active = await keys.select(eb => eb.fn.countAll().as('n')).where('revoked_at', 'is', null).executeTakeFirstOrThrow()
    if (Number(active.n) >= allowance.active) {
      throw new KeyAllowanceError(`An account may hold at most ${allowance.active} active keys. Revoke one you no longer use, then create the new one.`, 409)
    }
    const dayAgo = new Date(Date.now() - DAY_MS).toISOString()
    const recent = await keys.select('created_at').where('created_at', '>', dayAgo).orderBy('created_at', 'desc').limit(allowance.perDay).execute()
    if (recent.length >= allowance.perDay) {
      const next = new Date(Date.parse(recent[recent.length - 1].created_at) + DAY_MS).toISOString().slice(0, 16).replace('T', ' ')
      throw new KeyAllowanceError(`An account may create at most ${allowance.perDay} keys in 24 hours (revoked ones count). The next one can be created from ${next} UTC.`, 429)
    }
  }

  async listKeys (accountId: number): Promise<ApiKeyInfo[]> {
    const rows = await this.#db.selectFrom('api_keys').selectAll().where('account_id', '=', accountId).orderBy('id').execute()
    return rows.map(toKeyInfo)
  }

  /**
   * The keys the dashboard lists: all active ones (as many as the allowance lets an account
   * hold) and the `revokedShown` latest revoked, newest first; the page stays the same size
   * however many keys an account has revoked.
   */
  async listKeysForPage (accountId: number, revokedShown: number): Promise<KeyListing> {
    const keys = this.#db.selectFrom('api_keys').where('account_id', '=', accountId)
    const [active, revoked, revokedCount] = await Promise.all([
      keys.selectAll().where('revoked_at', 'is', null).orderBy('id', 'desc').execute(),
      keys.selectAll().where('revoked_at', 'is not', null).orderBy('id', 'desc').limit(revokedShown).execute(),
      keys.select(eb => eb.fn.countAll().as('n')).where('revoked_at', 'is not', null).executeTakeFirstOrThrow(),
    ])
    const listed = [...active, ...revoked].sort((a, b) => b.id - a.id).map(toKeyInfo)
    return { keys: listed, olderRevoked: Math.max(0, Number(revokedCount.n) - revoked.length) }
  }

  /**
   * Revokes by display prefix; returns false when no active key has it. With
   * `accountId` (the dashboard), only that account's keys can match, so one
   * account can never revoke another's key by guessing its prefix.
   */
  async revokeKey (prefix: string, opts: { accountId?: number } = {}): Promise<boolean> {
    let query = this.#db.updateTable('api_keys')
      .set({ revoked_at: now() })
      .where('prefix', '=', prefix)
      .where('revoked_at', 'is', null)
    if (opts.accountId !== undefined) query = query.where('account_id', '=', opts.accountId)
    const result = await query.executeTakeFirst()
    return Number(result.numUpdatedRows) > 0
  }

  /**
   * The operator's revocation (`chatd keys revoke`): by a whole key, as an
   * operator pastes a leaked one (found by its prefix, then matched by its
   * hash, so a key that merely starts like another revokes nothing), or by
   * its display prefix. Says which key it was, and whether it was already
   * revoked, so "nothing revoked" is never mistaken for "safe".
   */
  async revokeByKeyOrPrefix (text: string): Promise<Revocation> {
    const whole = isWellFormedApiKey(text)
    const row = await this.#db.selectFrom('api_keys')
      .innerJoin('accounts', 'accounts.id', 'api_keys.account_id')
      .select(['api_keys.id', 'api_keys.prefix', 'api_keys.hash', 'api_keys.revoked_at', 'accounts.email'])
      .where('api_keys.prefix', '=', whole ? apiKeyPrefix(text) : text)
      .executeTakeFirst()
    if (!row || (whole && !sameHash(row.hash, hashApiKey(text)))) return { outcome: 'unknown', by: whole ? 'key' : 'prefix' }
    const key = { prefix: row.prefix, email: row.email }
    if (row.revoked_at !== null) return { outcome: 'already', ...key, revokedAt: row.revoked_at }
    const result = await this.#db.updateTable('api_keys').set({ revoked_at: now() }).where('id', '=', row.id).where('revoked_at', 'is', null).executeTakeFirst()
    // Another revocation may have come first; either way the key is revoked now.
    return Number(result.numUpdatedRows) > 0 ? { outcome: 'revoked', ...key } : { outcome: 'already', ...key, revokedAt: 'just now' }
  }

  /** Checks a presented key. The lookup is by prefix; the decision is a constant-time hash comparison. */
  async authenticate (key: string): Promise<Authentication> {
    if (!isWellFormedApiKey(key)) return { ok: false, reason: 'malformed' }
    const row = await this.#db.selectFrom('api_keys')
      .innerJoin('accounts', 'accounts.id', 'api_keys.account_id')
      .select(['api_keys.id as keyId', 'api_keys.hash', 'api_keys.revoked_at', 'api_keys.last_used_at', 'accounts.id', 'accounts.email', 'accounts.tier', 'accounts.is_admin', 'accounts.password_hash', 'accounts.created_at'])
      .where('api_keys.prefix', '=', apiKeyPrefix(key))
      .executeTakeFirst()
    if (!row || !sameHash(row.hash, hashApiKey(key))) return { ok: false, reason: 'unknown' }
    if (row.revoked_at !== null) return { ok: false, reason: 'revoked' }
    if (row.last_used_at === null || Date.now() - Date.parse(row.last_used_at) >= LAST_USED_RESOLUTION_MS) {
      await this.#db.updateTable('api_keys').set({ last_used_at: now() }).where('id', '=', row.keyId).execute()
    }
    return { ok: true, account: toAccount(row), keyId: row.keyId, keyPrefix: apiKeyPrefix(key) }
  }
}
