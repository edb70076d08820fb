// Registration, log-in, log-out and changing the password.

import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify'
import { AccountError } from '../../accounts/accounts.ts'
import { formToken } from '../csrf.ts'
import { field, requireUser } from '../guard.ts'
import type { DashboardDeps } from '../deps.ts'
import { clearSessionCookie, sessionToken, setSessionCookie } from '../session-cookie.ts'

/** Why an admin's account is not deleted on a page (account.ts, admin.ts): the server is never left without one by a click. */
export const ADMIN_DELETED_BY_CLI = 'An admin account is not deleted here: the operator runs npx chatd accounts delete --email <address> --yes on the server.'

/** The log-in page's notices, by `?done=`: a fixed list, so a crafted link cannot put words on the page. */
const LOGIN_NOTICES = new Map<unknown, string>([
  ['deleted', 'The account was deleted, with its keys, usage history and stored responses.'],
])

export async function accountRoutes (app: FastifyInstance, deps: DashboardDeps): Promise<void> {
  const { accounts, sessions, config } = deps
  const throttled = { config: { rateLimit: deps.loginLimit } }
  const registrationOpen = config.registration === 'open'

  /**
   * A new session for every log-in and registration, and the cookie the
   * browser came with ended first: a token planted or left there before is
   * never promoted to the new log-in (session fixation).
   */
  const startSession = async (request: FastifyRequest, reply: FastifyReply, accountId: number): Promise<void> => {
    const old = sessionToken(request)
    if (old) await sessions.end(old)
    const token = await sessions.create(accountId)
    setSessionCookie(reply, token, config.cookieSecure, sessions.ttlMs)
  }

  app.get('/login', async (request, reply) => {
    if (request.user) return reply.redirect('/api', 303)
    return reply.view('login', { title: 'Log in', csrf: formToken(reply), email: '', notice: LOGIN_NOTICES.get((request.query as Record<string, unknown>).done) })
  })

  app.post('/login', { ...throttled, preHandler: app.csrfProtection }, async (request, reply) => {
    const email = field(request.body, 'email')
    const account = await accounts.verifyLogin(email, field(request.body, 'password'))
    if (!account) {
      return reply.code(401).view('login', { title: 'Log in', csrf: formToken(reply), email, error: 'That email and password do not match an account with a password.' })
    }
    await startSession(request, reply, account.id)
    // Expired sessions are swept now and then, here, rather than by a timer every replica would run.
    void sessions.prune().catch(err => request.log.warn({ err }, 'pruning expired sessions failed'))
    return reply.redirect('/api', 303)
  })

  app.get('/register', async (request, reply) => {
    if (request.user) return reply.redirect('/api', 303)
    return reply.code(registrationOpen ? 200 : 403).view('register', { title: 'Create an account', csrf: formToken(reply), email: '' })
  })

  app.post('/register', { ...throttled, preHandler: app.csrfProtection }, async (request, reply) => {
    if (!registrationOpen) return reply.code(403).view('register', { title: 'Create an account', csrf: formToken(reply), email: '' })
    const email = field(request.body, 'email')
    const password = field(request.body, 'password')
    const again = (message: string, status = 400) => reply.code(status).view('register', { title: 'Create an account', csrf: formToken(reply), email, error: message })
    if (password !== field(request.body, 'confirm')) return again('The two passwords differ.')
    try {
      const account = await accounts.register({ email, password })
      await startSession(request, reply, account.id)
    } catch (err) {
      if (err instanceof AccountError) return again(err.message, /already exists/.test(err.message) ? 409 : 400)
      throw err
    }
    return reply.redirect('/api', 303)
  })

  app.post('/logout', { preHandler: app.csrfProtection }, async (request, reply) => {
    const token = sessionToken(request)
    if (token) await sessions.end(token)
    clearSessionCookie(reply, config.cookieSecure)
    return reply.redirect('/api/login', 303)
  })

  app.get('/password', async (request, reply) => {
    const user = requireUser(request, reply)
    if (!user) return reply
    return reply.view('password', { title: 'Change password', user, csrf: formToken(reply) })
  })

  app.post('/password', { ...throttled, preHandler: app.csrfProtection }, async (request, reply) => {
    const user = requireUser(request, reply)
    if (!user) return reply
    const again = (message: string, status = 400) => reply.code(status).view('password', { title: 'Change password', user, csrf: formToken(reply), error: message })
    const next = field(request.body, 'new')
    if (next !== field(request.body, 'confirm')) return again('The two new passwords differ.')
    if (!await accounts.verifyLogin(user.email, field(request.body, 'current'))) return again('The current password is wrong.', 401)
    try {
      await accounts.setPassword(user.id, next)
    } catch (err) {
      if (err instanceof AccountError) return again(err.message)
      throw err
    }
    // Whoever else held a session (a stolen cookie, another browser) is logged out.
    await sessions.endAll(user.id, { keep: sessionToken(request) })
    return reply.redirect('/api?done=password', 303)
  })

  app.get('/delete-account', async (request, reply) => {
    const user = requireUser(request, reply)
    if (!user) return reply
    return reply.view('delete-account', { title: 'Delete account', user, csrf: formToken(reply) })
  })

  app.post('/delete-account', { ...throttled, preHandler: app.csrfProtection }, async (request, reply) => {
    const user = requireUser(request, reply)
    if (!user) return reply
    const again = (message: string, status = 400) => reply.code(status).view('delete-account', { title: 'Delete account', user, csrf: formToken(reply), error: message })
    if (user.isAdmin) return again(ADMIN_DELETED_BY_CLI, 403)
    if (field(request.body, 'confirm') !== 'yes') return again('Tick the box to confirm that the account and everything it holds are to be deleted.')
    if (!await accounts.verifyLogin(user.email, field(request.body, 'password'))) return again('The password is wrong; nothing was deleted.', 401)
    // Keys, sessions (this one too), usage and stored responses go with it (the database's cascades).
    await accounts.delete(user.id)
    clearSessionCookie(reply, config.cookieSecure)
    return reply.redirect('/api/login?done=deleted', 303)
  })
}
