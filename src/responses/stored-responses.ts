// Responses kept for the Responses API (`store: true`), per account, in the
// database every replica shares, so nothing is lost on a restart. A stored
// response holds the response object as it was returned and that turn's own
// input items; a conversation is the chain of responses linked by
// `previous_response_id`, read back oldest first.
//
// Everything is bounded: responses per account (storing one more evicts the
// account's oldest), bytes per response (a larger one is not stored), earlier
// responses followed (MAX_EARLIER_RESPONSES) and bytes of one conversation
// read back. Every read and delete is filtered by the account: another
// account's id is simply not found.

import { sql } from 'kysely'
import { DEFAULT_STORED_RESPONSE_LIMITS, type StoredResponseLimits } from '../config.ts'
import { ApiError } from '../errors.ts'
import type { Db } from '../store/database.ts'
import { isPostgres } from '../store/dialect.ts'

/** An item of a conversation (a message, function_call, function_call_output, reasoning…), each with an `id`. */
export type ConversationItem = Record<string, unknown>

/** What the Responses door stores after answering. */
export interface StoredResponseRecord {
  /** resp_…, as the client saw it. */
  id: string
  accountId: number
  /** The response this one continues; null for a conversation's first. */
  previousResponseId: string | null
  model: string
  /** The response's own created_at (seconds); the store keeps its own clock's time for retention. */
  createdAt: number
  /** The response object exactly as returned (its `output` is an array of items). */
  response: Record<string, unknown>
  /** This turn's input items only; earlier turns' are in their own records. */
  input: ConversationItem[]
}

/** Earlier responses a conversation may reach back through; one longer is refused, never walked. */
export const MAX_EARLIER_RESPONSES = 1000

/** Longest response id kept (the column's width); the server makes them far shorter. */
const MAX_ID_LENGTH = 128

/** Rows read per query when a conversation's bodies are fetched (well under either database's parameter limit). */
const BODIES_PER_QUERY = 200

/** Bodies read at a time while a page of input items is listed (a page rarely needs more). */
const BODIES_PER_PAGE_READ = 8

/** Where a store writes what it drops (a response over the byte cap) or fails at in the background. */
export interface StoreLog {
  warn (obj: Record<string, unknown>, msg: string): void
}

interface Link {
  id: string
  previous_response_id: string | null
  bytes: number
}

interface Body {
  response: string
  input: string
}

export class StoredResponses {
  readonly #db: Db
  readonly #limits: StoredResponseLimits
  readonly #now: () => Date
  readonly #log: StoreLog

  /** `now`: the clock stored rows are dated by (tests move it); `log`: where dropped responses are reported. */
  constructor (db: Db, opts: { limits?: StoredResponseLimits; now?: () => Date; log?: StoreLog } = {}) {
    this.#db = db
    this.#limits = opts.limits ?? DEFAULT_STORED_RESPONSE_LIMITS
    this.#now = opts.now ?? (() => new Date())
    this.#log = opts.log ?? { warn: () => {} }
  }

  /**
   * Stores a response. One larger than RESPONSES_MAX_BYTES is not stored (a
   * warning is logged; the reply the client got is unaffected); storing past
   * RESPONSES_MAX_PER_ACCOUNT evicts the account's oldest. Storing the same id
   * again changes nothing.
   */
  async save (record: StoredResponseRecord): Promise<void> {
    if (this.#limits.maxPerAccount === 0) return
    if (record.id.length === 0 || record.id.length > MAX_ID_LENGTH) throw new Error(`a stored response's id must have 1 to ${MAX_ID_LENGTH} characters`)
    const response = JSON.stringify(record.response)
    const input = JSON.stringify(record.input)
    const bytes = Buffer.byteLength(response) + Buffer.byteLength(input)
    if (bytes > this.#limits.maxBytes) {
      this.#log.warn({ responseId: record.id, accountId: record.accountId, bytes, maxBytes: this.#limits.maxBytes },
        'response not stored: larger than RESPONSES_MAX_BYTES; it cannot be retrieved or continued')
      return
    }
    await this.#db.insertInto('stored_responses').values({
      id: record.id,
      account_id: record.accountId,
      previous_response_id: record.previousResponseId,
      model: record.model,
      created_at: this.#now().toISOString(),
      bytes,
      response,
      input,
    }).onConflict(oc => oc.column('id').doNothing()).execute()
    try {
      await this.#evictBeyondCap(record.accountId)
    } catch (err) {
      // The response is stored; the next save evicts what this one could not.
      this.#log.warn({ err: (err as Error).message, accountId: record.accountId }, 'could not evict the oldest stored responses past RESPONSES_MAX_PER_ACCOUNT')
    }
  }

  /** Deletes every row of the account older than its newest `maxPerAccount` (idempotent: replicas racing agree). */
  async #evictBeyondCap (accountId: number): Promise<void> {
    await this.#db.deleteFrom('stored_responses')
      .where('account_id', '=', accountId)
      .where('seq', '<=', eb => eb.selectFrom('stored_responses').select('seq')
        .where('account_id', '=', accountId)
        .orderBy('seq', 'desc')
        .limit(1)
        .offset(this.#limits.maxPerAccount))
      .execute()
  }

  /** The response object as it was returned, as JSON text; undefined when the account has no such response. */
  async get (accountId: number, id: string): Promise<string | undefined> {
    const row = await this.#db.selectFrom('stored_responses').select('response')
      .where('account_id', '=', accountId)
      .where('id', '=', id)
      .executeTakeFirst()
    return row?.response
  }

  /** Deletes the account's response; false when it has none by that id. Conversations through it can no longer be continued. */
  async delete (accountId: number, id: string): Promise<boolean> {
    const result = await this.#db.deleteFrom('stored_responses')
      .where('account_id', '=', accountId)
      .where('id', '=', id)
      .executeTakeFirst()
    return Number(result.numDeletedRows) > 0
  }

  /**
   * The whole conversation that ends at response `id`, to continue it: for each
   * response from the first to `id`, its input items then its output items.
   * Undefined when `id` is not the account's, or when a response on the way was
   * deleted or expired (the conversation is broken; the door answers 404).
   * Throws 400 naming `previous_response_id` when the conversation reaches back
   * through more than MAX_EARLIER_RESPONSES responses or holds more than
   * RESPONSES_MAX_CONVERSATION_BYTES.
   */
  async chain (accountId: number, id: string): Promise<ConversationItem[] | undefined> {
    const links = await this.#links(accountId, id)
    if (links.length === 0) return undefined
    const first = links[links.length - 1]
    if (first.previous_response_id !== null) {
      if (links.length <= MAX_EARLIER_RESPONSES) return undefined // the walk stopped at a response that is gone
      throw new ApiError('invalid_parameter',
        `The conversation ending at previous_response_id reaches back through more than ${MAX_EARLIER_RESPONSES} responses; send the conversation as input instead.`,
        { param: 'previous_response_id' })
    }
    const bytes = links.reduce((sum, link) => sum + link.bytes, 0)
    if (bytes > this.#limits.maxConversationBytes) {
      throw new ApiError('invalid_parameter',
        `The conversation ending at previous_response_id holds ${bytes} bytes, more than this server reads back (${this.#limits.maxConversationBytes}, RESPONSES_MAX_CONVERSATION_BYTES); send the conversation as input instead.`,
        { param: 'previous_response_id' })
    }
    const bodies = await this.#bodies(accountId, links)
    if (bodies === undefined) return undefined // deleted while being read
    const items: ConversationItem[] = []
    for (const body of bodies.reverse()) items.push(...JSON.parse(body.input) as ConversationItem[], ...outputOf(body.response))
    return items
  }

  /**
   * The items the model saw for response `id`, oldest first: the earlier
   * responses' input and output items, then this response's own input. Earlier
   * responses are followed back while they exist and fit in
   * RESPONSES_MAX_CONVERSATION_BYTES (up to MAX_EARLIER_RESPONSES); the walk
   * stops at one deleted or expired, so what is listed is what is still stored.
   * Undefined when the account has no response `id`.
   */
  async inputItems (accountId: number, id: string): Promise<ConversationItem[] | undefined> {
    const page = await this.inputItemsPage(accountId, id, { order: 'asc', limit: Infinity })
    return page === undefined || page === 'after-not-found' ? undefined : page.data
  }

  /**
   * One page of inputItems(), in `order`, starting after the item `after`: only the bodies the
   * page needs are parsed (a body before the cursor is searched as text, not parsed), so a page of
   * a long conversation costs about what the page holds. Undefined when the account has no
   * response `id`; 'after-not-found' when no listed item has the id `after`.
   */
  async inputItemsPage (accountId: number, id: string, opts: { order: 'asc' | 'desc'; after?: string; limit: number }): Promise<{ data: ConversationItem[]; hasMore: boolean } | 'after-not-found' | undefined> {
    const links = await this.#links(accountId, id)
    if (links.length === 0) return undefined
    // The response itself always; then earlier ones, newest first, while their total fits.
    let kept = 1
    let bytes = links[0].bytes
    while (kept < links.length && bytes + links[kept].bytes <= this.#limits.maxConversationBytes) bytes += links[kept++].bytes
    // Listing order: oldest first, its input then its output; the response itself: its input only.
    const listed = links.slice(0, kept).reverse()
    const bodies = opts.order === 'asc' ? listed : [...listed].reverse()
    const needle = opts.after === undefined ? undefined : `"id":${JSON.stringify(opts.after)}`
    let found = opts.after === undefined
    const data: ConversationItem[] = []
    for (let i = 0; i < bodies.length; i += BODIES_PER_PAGE_READ) {
      const chunk = bodies.slice(i, i + BODIES_PER_PAGE_READ)
      const read = await this.#bodies(accountId, chunk)
      if (read === undefined) return undefined // deleted while being read
      for (const [j, body] of read.entries()) {
        const own = chunk[j].id === id
        // A body before the cursor that does not hold it is skipped unparsed.
        if (!found && !body.input.includes(needle!) && (own || !body.response.includes(needle!))) continue
        let items = [...JSON.parse(body.input) as ConversationItem[], ...(own ? [] : outputOf(body.response))]
        if (opts.order === 'desc') items = items.reverse()
        for (const item of items) {
          if (!found) {
            found = item.id === opts.after
            continue
          }
          if (data.length === opts.limit) return { data, hasMore: true }
          data.push(item)
        }
      }
    }
    return found ? { data, hasMore: false } : 'after-not-found'
  }

  /**
   * Response `id` and the earlier responses it continues, newest first: one
   * recursive query (the same SQL on both databases), never more than
   * MAX_EARLIER_RESPONSES + 1 rows, and only ids and sizes: bodies are read
   * once the conversation is known to fit.
   */
  async #links (accountId: number, id: string): Promise<Link[]> {
    const { rows } = await sql<Link & { depth: number }>`
      WITH RECURSIVE conversation (id, previous_response_id, bytes, depth) AS (
        SELECT id, previous_response_id, bytes, 0 FROM stored_responses
        WHERE account_id = ${accountId} AND id = ${id}
        UNION ALL
        SELECT s.id, s.previous_response_id, s.bytes, c.depth + 1
        FROM stored_responses s JOIN conversation c ON s.id = c.previous_response_id
        WHERE s.account_id = ${accountId} AND c.depth < ${MAX_EARLIER_RESPONSES}
      )
      SELECT id, previous_response_id, bytes, depth FROM conversation ORDER BY depth`.execute(this.#db)
    return rows.map(r => ({ id: r.id, previous_response_id: r.previous_response_id, bytes: Number(r.bytes) }))
  }

  /** The bodies of `links`, in their order; undefined when one was deleted meanwhile. */
  async #bodies (accountId: number, links: Link[]): Promise<Body[] | undefined> {
    const byId = new Map<string, Body>()
    for (let i = 0; i < links.length; i += BODIES_PER_QUERY) {
      const ids = links.slice(i, i + BODIES_PER_QUERY).map(link => link.id)
      const rows = await this.#db.selectFrom('stored_responses').select(['id', 'response', 'input'])
        .where('account_id', '=', accountId)
        .where('id', 'in', ids)
        .execute()
      for (const row of rows) byId.set(row.id, row)
    }
    const bodies = links.map(link => byId.get(link.id))
    return bodies.every(body => body !== undefined) ? bodies : undefined
  }

  /**
   * Deletes at most `batch` responses stored before `cutoff`, any account's;
   * returns how many. On PostgreSQL, rows another replica is deleting are
   * skipped, so replicas running the job together share the work.
   */
  async deleteStoredBefore (cutoff: Date, batch: number): Promise<number> {
    const result = await this.#db.deleteFrom('stored_responses')
      .where('seq', 'in', eb => {
        const oldest = eb.selectFrom('stored_responses').select('seq')
          .where('created_at', '<', cutoff.toISOString())
          .limit(batch)
        return isPostgres(this.#db) ? oldest.forUpdate().skipLocked() : oldest
      })
      .executeTakeFirst()
    return Number(result.numDeletedRows)
  }

  /** How many responses the account has stored. */
  async count (accountId: number): Promise<number> {
    const { n } = await this.#db.selectFrom('stored_responses')
      .select(eb => eb.fn.countAll<number>().as('n'))
      .where('account_id', '=', accountId)
      .executeTakeFirstOrThrow()
    return Number(n)
  }
}

/** A stored response's output items; none when it has no `output` array. */
function outputOf (responseJson: string): ConversationItem[] {
  const output = (JSON.parse(responseJson) as { output?: unknown }).output
  return Array.isArray(output) ? output as ConversationItem[] : []
}
