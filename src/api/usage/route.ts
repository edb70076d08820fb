// GET /api/v1/usage: the calling account's tier, limits, what remains, and
// daily totals for the last 30 days. Reading it counts against no tier limit,
// only against the account's reads (reads.ts).

import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import type { UsageRecords } from '../../accounts/usage-records.ts'
import type { Limiter } from '../../limits/limiter.ts'
import { errorResponses } from '../error-schema.ts'
import { usageReport } from './report.ts'
import { UsageReport } from './schema.ts'

export const usageRoute: FastifyPluginAsyncTypebox<{ limiter: Limiter; usage: UsageRecords }> = async (app, { limiter, usage }) => {
  app.get('/usage', {
    config: { meteredRead: true },
    schema: {
      tags: ['usage'],
      summary: 'The account\'s tier, limits, remaining allowance and recent usage',
      security: [{ bearerAuth: [] }],
      response: { 200: UsageReport, ...errorResponses },
    },
  }, async request => usageReport(request.account!, limiter, usage))
}
