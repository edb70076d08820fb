// For admin accounts: the accounts with their tiers, a page at a time, changing a tier (the
// same as `chatd accounts set-tier`) and deleting an account that is not an admin's (as
// `chatd accounts delete` does).

import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify'
import { MAX_EMAIL_LENGTH, normalizeEmail, type Account } from '../../accounts/accounts.ts'
import { formToken } from '../csrf.ts'
import { field, requireUser } from '../guard.ts'
import type { DashboardDeps } from '../deps.ts'
import { ADMIN_DELETED_BY_CLI } from './account.ts'

/**
 * Text with every invisible or control character shown as <U+XXXX>. Emails
 * are checked when accounts are made now, but an account made before may
 * hold a zero-width space or a NUL and must not pass for another on this page.
 */
export function showInvisible (text: string): string {
  return text.replace(/[\p{Cc}\p{Cf}\p{Co}\p{Cs}\p{Zl}\p{Zp}\p{Default_Ignorable_Code_Point}]|(?! )\s/gu, ch => `<U+${ch.codePointAt(0)!.toString(16).toUpperCase().padStart(4, '0')}>`)
}

/**
 * Accounts the page shows at a time: with free registration there may be very many, and the
 * page is rendered on the thread that serves every request (50,000 in one page took 1.5 s).
 */
export const ACCOUNTS_PER_PAGE = 100
/** The highest page number read (an offset the databases bind as a safe integer). */
const MAX_PAGE = 1_000_000

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
    // A value sent twice, or not a string, reads as absent (as a form field does); the search is cut to an email's length.
    const text = (name: string): string => field(request.query, name)
    // Shown as it is compared: as emails are stored (NFKC, lower case).
    const search = normalizeEmail(text('q').slice(0, MAX_EMAIL_LENGTH))
    // Any page number a link can hold; past the last, an empty page with a link back.
    const asked = Number(text('page'))
    const page = Number.isInteger(asked) ? Math.min(Math.max(asked, 1), MAX_PAGE) : 1
    const { accounts: shown, total } = await accounts.listPage({ emailHas: search, limit: ACCOUNTS_PER_PAGE, offset: (page - 1) * ACCOUNTS_PER_PAGE })
    const pages = Math.max(1, Math.ceil(total / ACCOUNTS_PER_PAGE))
    const updated = Number(text('updated'))
    const link = (to: number): string => `/api/admin?${new URLSearchParams({ ...(search ? { q: search } : {}), page: String(to) })}`
    return reply.view('admin', {
      title: 'Accounts',
      user,
      csrf: formToken(reply),
      accounts: shown.map(a => ({ ...a, email: showInvisible(a.email) })),
      tiers: limiter.tiers.names(),
      defaultTier: limiter.tiers.defaultName,
      search,
      total,
      page,
      pages,
      previous: page > 1 ? link(Math.min(page - 1, pages)) : undefined,
      next: page < pages ? link(page + 1) : undefined,
      notice: text('deleted') === '1'
        ? 'The account was deleted, with its keys, sessions, usage history and stored responses.'
        : Number.isSafeInteger(updated) && shown.some(a => a.id === updated) ? 'The tier was changed; it applies from the next request.' : undefined,
    })
  })

  /** The account a form or link names by id; 404 when there is none. */
  const targetOf = async (value: unknown): Promise<Account> => {
    const id = Number(field(value, 'account'))
    const target = Number.isSafeInteger(id) ? await accounts.findById(id) : undefined
    if (!target) throw Object.assign(new Error('No such account.'), { statusCode: 404 })
    return target
  }
  /** The account a deletion names, unless it is an admin's (deleted by the operator's CLI only). */
  const deletable = async (value: unknown): Promise<Account> => {
    const target = await targetOf(value)
    if (target.isAdmin) throw Object.assign(new Error(ADMIN_DELETED_BY_CLI), { statusCode: 403 })
    return target
  }
  /** The page that names the account to delete, with the form's refusal when there is one. */
  const deletePage = (reply: FastifyReply, user: Account, target: Account, error?: string) =>
    reply.view('admin-delete', { title: 'Delete an account', user, csrf: formToken(reply), target: { ...target, email: showInvisible(target.email) }, error })

  app.get('/admin/delete', async (request, reply) => {
    const user = requireAdmin(request, reply)
    if (!user) return reply
    return deletePage(reply, user, await deletable(request.query))
  })

  app.post('/admin/delete', { preHandler: app.csrfProtection }, async (request, reply) => {
    const user = requireAdmin(request, reply)
    if (!user) return reply
    const target = await deletable(request.body)
    if (field(request.body, 'confirm') !== 'yes') return deletePage(reply.code(400), user, target, 'Tick the box to confirm the deletion.')
    await accounts.delete(target.id)
    return reply.redirect('/api/admin?deleted=1', 303)
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
    // Back to a page that shows the account changed: found by its email, however many there are.
    return reply.redirect(`/api/admin?${new URLSearchParams({ q: target.email, updated: String(target.id) })}`, 303)
  })
}
