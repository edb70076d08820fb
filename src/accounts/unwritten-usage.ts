// What happens to usage rows the database never took (usage-outbox.ts): they
// are logged whole, at error level, so an operator can still bill them from
// the log; and at shutdown the waiting ones get a last, bounded chance first.

import type { FastifyBaseLogger } from 'fastify'
import type { NewUsageRecordRow } from '../store/schema.ts'
import type { UsageRecords } from './usage-records.ts'

export function logUnwrittenUsage (log: FastifyBaseLogger, row: NewUsageRecordRow, reason: unknown): void {
  log.error({ usageRow: row, reason: reason instanceof Error ? reason.message : String(reason) }, 'usage row not written')
}

/** Called when the app closes, before the database does. */
export async function drainUsage (usage: UsageRecords, log: FastifyBaseLogger, timeoutMs = 5000): Promise<void> {
  if (usage.pending === 0) return
  for (const row of await usage.drain(timeoutMs)) logUnwrittenUsage(log, row, 'the database was still unavailable at shutdown')
}
