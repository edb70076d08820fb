// What the Responses door needs from the stored responses: keep a finished
// response (with the input items of its turn), and read back the conversation
// a previous_response_id continues. The database store implements it; the
// door knows only this interface.

import type { StoredResponseRecord } from '../../responses/stored-responses.ts'

export type { StoredResponseRecord }

export interface ResponseStorePort {
  save (record: StoredResponseRecord): Promise<void>
  /**
   * Every item of the conversation that ends at response `id`, oldest first: for each response
   * from the oldest ancestor to `id`, its input items then its output items. Undefined when `id`
   * does not exist for that account (another account's id is not found either).
   */
  chain (accountId: number, id: string): Promise<Array<Record<string, unknown>> | undefined>
}
