// Removes stored responses older than RESPONSES_RETENTION_DAYS (store/retention-job.ts:
// hourly, on every replica, in small batches).

import { RetentionJob, type RetentionOptions } from '../store/retention-job.ts'
import type { StoredResponses } from './stored-responses.ts'

export class ResponseRetention extends RetentionJob {
  constructor (store: Pick<StoredResponses, 'deleteStoredBefore'>, opts: RetentionOptions) {
    super('stored responses', (cutoff, batch) => store.deleteStoredBefore(cutoff, batch), opts)
  }
}
