// The dashboard's home page (tier, limits, usage chart, keys, recent
// requests) and creating and revoking keys.

import type { FastifyInstance } from 'fastify'
import { AccountError } from '../../accounts/accounts.ts'
import { usageReport } from '../../api/usage/report.ts'
import { usageCharts } from '../chart.ts'
import { formToken } from '../csrf.ts'
import { field, requireUser } from '../guard.ts'
import { serverUrl } from '../server-url.ts'
import { chooseAgentModel, chooseSetupModel } from '../setup-model.ts'
import { AGENT_PROMPT_TOKENS, modelsSnippet, setupSnippets } from '../setup-snippets.ts'
import type { DashboardDeps } from '../deps.ts'

/**
 * Notices a redirect may ask for; a fixed list, so a crafted link cannot put
 * words on the page. A Map, not an object: ?done=constructor must find nothing,
 * not Object.prototype's constructor.
 */
const NOTICES = new Map<unknown, string>([
  ['revoked', 'The key was revoked. Requests with it now get 401.'],
  ['password', 'Your password was changed. Other sessions were logged out.'],
])

const MAX_KEY_NAME = 100

/** Revoked keys the home page lists (the latest); older ones are only counted. */
export const REVOKED_KEYS_SHOWN = 20

export async function keyRoutes (app: FastifyInstance, deps: DashboardDeps): Promise<void> {
  const { accounts, limiter, usage, models, config } = deps

  app.get('/', async (request, reply) => {
    const user = requireUser(request, reply)
    if (!user) return reply
    const [report, keys, recent] = await Promise.all([
      usageReport(user, limiter, usage),
      accounts.listKeysForPage(user.id, REVOKED_KEYS_SHOWN),
      usage.recent(user.id, 10),
    ])
    const done = (request.query as Record<string, unknown>).done
    return reply.view('home', {
      title: 'Dashboard',
      user,
      csrf: formToken(reply),
      report,
      charts: usageCharts(report.daily),
      totals: report.daily.reduce((n, d) => ({ calls: n.calls + d.calls, tokens: n.tokens + d.total_tokens }), { calls: 0, tokens: 0 }),
      // Newest first; the latest revoked keys stay listed so their usage rows still have a name.
      keys: keys.keys,
      olderRevoked: keys.olderRevoked,
      recent,
      notice: NOTICES.get(done),
      baseUrl: serverUrl(request),
    })
  })

  app.post('/keys', { preHandler: app.csrfProtection }, async (request, reply) => {
    const user = requireUser(request, reply)
    if (!user) return reply
    const name = field(request.body, 'name').trim()
    if (name === '' || name.length > MAX_KEY_NAME) {
      throw Object.assign(new AccountError(`A key needs a name of 1 to ${MAX_KEY_NAME} characters.`), { statusCode: 400 })
    }
    // Bounded: one account cannot grow the keys table, or its own page, without end.
    const { key, info } = await accounts.createKey(user.id, { name, allowance: config.keyAllowance })
    // The one time the key is shown. The page is not cached (no-store), and the
    // key is in no redirect, no cookie and no log line.
    const baseUrl = serverUrl(request)
    const tier = limiter.tierOf(user)
    const allowed = (id: string): boolean => limiter.tiers.allowsModel(tier, id)
    const choice = chooseSetupModel(models, allowed)
    // Each agent gets the first ready model that can hold its prompt, which may not be curl's.
    const agents = {
      codex: chooseAgentModel(models, allowed, AGENT_PROMPT_TOKENS.codex),
      claudeCode: chooseAgentModel(models, allowed, AGENT_PROMPT_TOKENS.claudeCode),
    }
    return reply.code(201).view('key-created', {
      title: 'New API key',
      user,
      csrf: formToken(reply),
      key,
      info,
      baseUrl,
      model: choice.model,
      // Every model and its state, when none is ready to name in the examples.
      models: choice.model ? [] : choice.models,
      snippets: !baseUrl ? [] : choice.model ? setupSnippets({ url: baseUrl, key, model: choice.model, agents, tier }) : [modelsSnippet({ url: baseUrl, key })],
    })
  })

  app.post('/keys/revoke', { preHandler: app.csrfProtection }, async (request, reply) => {
    const user = requireUser(request, reply)
    if (!user) return reply
    // Scoped to the logged-in account: another account's prefix matches nothing.
    const revoked = await accounts.revokeKey(field(request.body, 'prefix'), { accountId: user.id })
    if (!revoked) throw Object.assign(new Error('No active key of yours has that prefix.'), { statusCode: 404 })
    return reply.redirect('/api?done=revoked', 303)
  })
}
