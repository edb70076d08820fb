// For admin accounts: every account with its tier, and changing a tier (the
// same as `chatd accounts set-tier`).

import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify'
import type { Account } from '../../accounts/accounts.ts'
import { formToken } from '../csrf.ts'
import { field, requireUser } from '../guard.ts'
import type { DashboardDeps } from '../deps.ts'

/**
 * Text with every invisible or control character shown as <U+XXXX>. Emails
 * are checked when accounts are made now, but an account made before may
 * hold a zero-width space or a NUL and must not pass for another on this page.
 */
export function showInvisible (text: string): string {
  return text.replace(/[\p{Cc}\p{Cf}\p{Co}\p{Cs}\p{Zl}\p{Zp}\p{Default_Ignorable_Code_Point}]|(?! )\s/gu, ch => `<U+${ch.codePointAt(0)!.toString(16).toUpperCase().padStart(4, '0')}>`)
}

function requireAdmin (request: FastifyRequest, reply: FastifyReply): Account | undefined {
  const user = requireUser(request, reply)
  if (user && !user.isAdmin) throw Object.assign(new Error('Only administrators may see this page.'), { statusCode: 403 })
  return user
}

export async function adminRoutes (app: FastifyInstance, deps: DashboardDeps): Promise<void> {
  const { accounts, limiter } = deps

  app.get('/admin', async (request, reply) => {
    const user = requireAdmin(request, reply)
    if (!user) return reply
    const updated = (request.query as Record<string, string | undefined>).updated
    const all = await accounts.list()
    return reply.view('admin', {
      title: 'Accounts',
      user,
      csrf: formToken(reply),
      accounts: all.map(a => ({ ...a, email: showInvisible(a.email) })),
      tiers: limiter.tiers.names(),
      defaultTier: limiter.tiers.defaultName,
      notice: updated !== undefined && all.some(a => String(a.id) === updated) ? 'The tier was changed; it applies from the next request.' : undefined,
    })
  })

  app.post('/admin/tier', { preHandler: app.csrfProtection }, async (request, reply) => {
    const user = requireAdmin(request, reply)
    if (!user) return reply
    const tier = field(request.body, 'tier')
    const id = Number(field(request.body, 'account'))
    // The message names no submitted value: it is logged, and a form field may hold anything.
    if (!limiter.tiers.has(tier)) throw Object.assign(new Error('There is no such tier in the tiers file.'), { statusCode: 400 })
    const target = Number.isInteger(id) ? await accounts.findById(id) : undefined
    if (!target) throw Object.assign(new Error('No such account.'), { statusCode: 404 })
    await accounts.setTier(target.id, tier)
    return reply.redirect(`/api/admin?updated=${target.id}`, 303)
  })
}
