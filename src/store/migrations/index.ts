// The ordered list of migrations. Listed in code rather than read from a folder
// so the Migrator needs no file-system provider and names never depend on paths.
// Append new ones; never rename or edit one that has shipped.

import type { Migration } from 'kysely'
import { accountsAndKeys } from './001-accounts-and-keys.ts'
import { sessionsUsageSettings } from './002-sessions-usage-settings.ts'
import { usageRequestId } from './003-usage-request-id.ts'
import { normalizedEmails } from './004-normalized-emails.ts'
import { emailSkeletons } from './005-email-skeletons.ts'
import { storedResponses } from './006-stored-responses.ts'
import { usageDaily } from './007-usage-daily.ts'

export const migrations: Record<string, Migration> = {
  '001-accounts-and-keys': accountsAndKeys,
  '002-sessions-usage-settings': sessionsUsageSettings,
  '003-usage-request-id': usageRequestId,
  '004-normalized-emails': normalizedEmails,
  '005-email-skeletons': emailSkeletons,
  '006-stored-responses': storedResponses,
  '007-usage-daily': usageDaily,
}
