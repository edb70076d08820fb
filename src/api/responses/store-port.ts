// What the Responses door needs from the stored responses: keep a finished
// response (with the input items of its turn), and read back the conversation
// a previous_response_id continues. The database store implements it; the
// door knows only this interface.

export interface StoredResponseRecord {
  /** resp_… */
  id: string
  accountId: number
  previousResponseId: string | null
  model: string
  /** Unix seconds. */
  createdAt: number
  /** The whole `response` object as it was returned. */
  response: Record<string, unknown>
  /** This turn's input items, each an item object with an `id` (msg_…, fc_…, fco_…, rs_…, ws_…). */
  input: Array<Record<string, unknown>>
}

export interface ResponseStorePort {
  save (record: StoredResponseRecord): Promise<void>
  /**
   * Every item of the conversation that ends at response `id`, oldest first: for each response
   * from the oldest ancestor to `id`, its input items then its output items. Undefined when `id`
   * does not exist for that account (another account's id is not found either).
   */
  chain (accountId: number, id: string): Promise<Array<Record<string, unknown>> | undefined>
}
