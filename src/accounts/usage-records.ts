// One row per API request that reached a model (completed, cancelled by the
// client going away, or failed), written when the request ends. Read back as
// daily totals for GET /api/v1/usage and the dashboard chart, as the recent
// list on the dashboard, and as the month's call count that seeds the
// allowance counter after a restart.

import type { Db } from '../store/database.ts'
import { isPostgres } from '../store/dialect.ts'
import { RetentionJob, type RetentionOptions } from '../store/retention-job.ts'
import type { NewUsageRecordRow, UsageStatus } from '../store/schema.ts'
import { isDatabaseUnavailable } from '../store/unavailable.ts'
import { GroupCommit } from './group-commit.ts'
import { UsageOutbox, type OutboxOptions } from './usage-outbox.ts'

export interface UsageRecord {
  accountId: number
  keyPrefix: string
  model: string
  promptTokens: number
  completionTokens: number
  status: UsageStatus
  errorCode: string | null
  latencyMs: number
  /** When the request ended; now by default. */
  at?: Date
  /** The chat completion's id; a second write of the same id is ignored. */
  requestId?: string
}

export interface DailyUsage {
  /** UTC day, YYYY-MM-DD. */
  date: string
  calls: number
  prompt_tokens: number
  completion_tokens: number
  total_tokens: number
}

/** A row of the dashboard's recent list: the record less its account and id, `at` as stored (ISO). */
export type RecentUsage = Omit<UsageRecord, 'accountId' | 'at' | 'requestId'> & { at: string }

const DAY_MS = 24 * 3600 * 1000

/** Statuses that used a call of the monthly allowance: the model ran for them (migration 007's trigger spells them too). */
export const BILLABLE_STATUSES: UsageStatus[] = ['completed', 'cancelled']

export class UsageRecords {
  readonly #db: Db
  readonly #outbox: UsageOutbox
  /** Rows that end at about the same time share one commit (group-commit.ts). */
  readonly #commits: GroupCommit<NewUsageRecordRow>

  /** `outbox`: how rows that met a database outage are retried (usage-outbox.ts). */
  constructor (db: Db, opts: { outbox?: OutboxOptions } = {}) {
    this.#db = db
    this.#outbox = new UsageOutbox(row => this.#insert([row]), opts.outbox)
    this.#commits = new GroupCommit({
      writeMany: rows => this.#insert(rows),
      writeOne: row => this.#insert([row]),
      sharedFailure: isDatabaseUnavailable,
    })
  }

  /**
   * Writes the row. When the database is unavailable the row is kept and
   * written once it is back ('queued'); any other failure throws.
   */
  async record (r: UsageRecord): Promise<'written' | 'queued'> {
    const row: NewUsageRecordRow = {
      account_id: r.accountId,
      key_prefix: r.keyPrefix,
      model: r.model,
      prompt_tokens: r.promptTokens,
      completion_tokens: r.completionTokens,
      status: r.status,
      error_code: r.errorCode,
      latency_ms: Math.round(r.latencyMs),
      created_at: (r.at ?? new Date()).toISOString(),
      request_id: r.requestId ?? null,
    }
    try {
      await this.#commits.add(row)
      return 'written'
    } catch (err) {
      if (!isDatabaseUnavailable(err)) throw err
      this.#outbox.add(row)
      return 'queued'
    }
  }

  async #insert (rows: NewUsageRecordRow[]): Promise<void> {
    // A retry of a row whose first insert did commit (only its answer was lost) changes nothing.
    // Each row inserted also adds to its day's totals (usage_daily), by the database's trigger.
    await this.#db.insertInto('usage_records').values(rows)
      .onConflict(oc => oc.column('request_id').doNothing())
      .execute()
  }

  /** Rows waiting for the database to come back. */
  get pending (): number {
    return this.#outbox.size
  }

  /** At shutdown: tries the waiting rows for up to `timeoutMs`; returns those still unwritten. */
  drain (timeoutMs: number): Promise<NewUsageRecordRow[]> {
    return this.#outbox.drain(timeoutMs)
  }

  /**
   * Billable calls since `since` (the start of the month): what the allowance counter starts from.
   * From midnight UTC (a month's start always is), the days' totals answer; otherwise the records.
   */
  async billableCallsSince (accountId: number, since: Date): Promise<number> {
    if (since.getTime() % DAY_MS === 0) {
      const { n } = await this.#db.selectFrom('usage_daily')
        .select(eb => eb.fn.sum<number | string | null>('billable_calls').as('n'))
        .where('account_id', '=', accountId)
        .where('day', '>=', since.toISOString().slice(0, 10))
        .executeTakeFirstOrThrow()
      return Number(n ?? 0)
    }
    const { n } = await this.#db.selectFrom('usage_records')
      .select(eb => eb.fn.countAll<number>().as('n'))
      .where('account_id', '=', accountId)
      .where('created_at', '>=', since.toISOString())
      .where('status', 'in', BILLABLE_STATUSES)
      .executeTakeFirstOrThrow()
    return Number(n)
  }

  /**
   * Totals per UTC day for the last `days` days, today included, oldest first,
   * with zero rows for days without calls so a chart has every day.
   */
  async daily (accountId: number, days = 30, now = new Date()): Promise<DailyUsage[]> {
    const today = Date.UTC(now.getUTCFullYear(), now.getUTCMonth(), now.getUTCDate())
    const first = new Date(today - (days - 1) * DAY_MS)
    // A row a day at most (usage_daily), however many requests the account made.
    const rows = await this.#db.selectFrom('usage_daily')
      .select(['day', 'calls', 'prompt_tokens', 'completion_tokens'])
      .where('account_id', '=', accountId)
      .where('day', '>=', first.toISOString().slice(0, 10))
      .execute()
    const byDay = new Map(rows.map(r => [r.day, r]))
    const out: DailyUsage[] = []
    for (let i = 0; i < days; i++) {
      const date = new Date(first.getTime() + i * DAY_MS).toISOString().slice(0, 10)
      const row = byDay.get(date)
      const prompt = Number(row?.prompt_tokens ?? 0)
      const completion = Number(row?.completion_tokens ?? 0)
      out.push({ date, calls: Number(row?.calls ?? 0), prompt_tokens: prompt, completion_tokens: completion, total_tokens: prompt + completion })
    }
    return out
  }

  /**
   * Deletes at most `batch` records written before `cutoff` (USAGE_RECORDS_RETENTION_DAYS), any
   * account's; returns how many. The day totals (usage_daily) keep counting them. Only the
   * `batch` oldest records by id are looked at, never the whole table: ids grow with the time a
   * record is written, so a batch with a younger record in it is the last one due (at most a
   * record or two written out of order waits a run). On PostgreSQL, records another replica is
   * deleting are skipped, so replicas running the job together share the work.
   */
  async deleteRecordedBefore (cutoff: Date, batch: number): Promise<number> {
    let oldest = this.#db.selectFrom('usage_records').select(['id', 'created_at']).orderBy('id').limit(batch)
    if (isPostgres(this.#db)) oldest = oldest.forUpdate().skipLocked()
    const result = await this.#db.deleteFrom('usage_records')
      .where('id', 'in', eb => eb.selectFrom(oldest.as('oldest')).select('oldest.id').where('oldest.created_at', '<', cutoff.toISOString()))
      .executeTakeFirst()
    return Number(result.numDeletedRows)
  }

  /** The account's latest requests, newest first. */
  async recent (accountId: number, limit = 20): Promise<RecentUsage[]> {
    const rows = await this.#db.selectFrom('usage_records').selectAll()
      .where('account_id', '=', accountId)
      .orderBy('created_at', 'desc')
      .orderBy('id', 'desc')
      .limit(limit)
      .execute()
    return rows.map(r => ({
      at: r.created_at,
      keyPrefix: r.key_prefix,
      model: r.model,
      promptTokens: r.prompt_tokens,
      completionTokens: r.completion_tokens,
      status: r.status,
      errorCode: r.error_code,
      latencyMs: r.latency_ms,
    }))
  }
}

/** Removes usage records older than USAGE_RECORDS_RETENTION_DAYS (store/retention-job.ts); the day totals keep counting them. */
export class UsageRetention extends RetentionJob {
  constructor (usage: Pick<UsageRecords, 'deleteRecordedBefore'>, opts: RetentionOptions) {
    super('usage records', (cutoff, batch) => usage.deleteRecordedBefore(cutoff, batch), opts)
  }
}
