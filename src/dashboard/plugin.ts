// The dashboard at /api: server-rendered pages (Eta templates, no front-end
// build) to register, log in, manage API keys and see the tier, limits and
// usage. Everything works without JavaScript except the copy button.
//
// Security, all scoped to these pages (the JSON API under /api/v1 is untouched):
// - @fastify/helmet (security-headers.ts): a strict CSP (scripts and styles
//   only from /api/assets), no framing, no sniffing, no referrer leaks;
// - every form carries a CSRF token bound to the session (csrf.ts; its secret
//   in a signed HttpOnly cookie) and every POST checks it;
// - sessions live in the database behind an HttpOnly SameSite cookie, a new
//   one at every log-in;
// - log-in and registration attempts are rate limited per client address
//   (@fastify/rate-limit, in Redis when REDIS_URL is set);
// - pages are never cached; an API key appears once, in the response to the
//   form that created it, and never again.

import { randomBytes } from 'node:crypto'
import { join } from 'node:path'
import type { FastifyError, FastifyInstance, FastifyReply, FastifyRequest } from 'fastify'
import cookie from '@fastify/cookie'
import formbody from '@fastify/formbody'
import rateLimit from '@fastify/rate-limit'
import fastifyStatic from '@fastify/static'
import view from '@fastify/view'
import { Eta } from 'eta'
import type { Account } from '../accounts/accounts.ts'
import { ApiError } from '../errors.ts'
import { isRedisUnavailable, limitsUnavailableError } from '../limits/unavailable.ts'
import { redactSecretLooking } from '../logging.ts'
import { databaseUnavailableError, isDatabaseUnavailable } from '../store/unavailable.ts'
import { sharedSetting } from '../store/settings.ts'
import { csrfProtection } from './csrf.ts'
import { accountRoutes } from './routes/account.ts'
import { adminRoutes } from './routes/admin.ts'
import { keyRoutes } from './routes/keys.ts'
import { securityHeaders } from './security-headers.ts'
import { sessionToken } from './session-cookie.ts'
import type { DashboardDeps, DashboardOptions } from './deps.ts'

export type { DashboardDeps, DashboardOptions }

declare module 'fastify' {
  interface FastifyRequest {
    /** The logged-in account on dashboard pages; null when nobody is. */
    user: Account | null
  }
}

const HERE = import.meta.dirname

/** The page for an error: 4xx messages are the user's to read; 5xx ones are not shown. */
function errorPage (err: FastifyError): { status: number; title: string; message: string; headers?: Record<string, string> } {
  // The database or Redis being down (restarting, unreachable) is an outage to wait
  // out: 503 with Retry-After, as the API answers, rather than a 500 page. A log-in
  // whose throttle cannot count is refused too, never let through uncounted.
  const outage = err instanceof ApiError
    ? (err.status === 503 ? err : undefined)
    : isDatabaseUnavailable(err)
      ? databaseUnavailableError(err)
      : isRedisUnavailable(err)
        ? limitsUnavailableError(err)
        : undefined
  if (outage) return { status: 503, title: 'Temporarily unavailable', message: 'This page cannot be served right now (the server is restarting, or cannot reach its storage). Try again in a moment.', headers: outage.headers }
  const status = err instanceof ApiError ? err.status : err.statusCode && err.statusCode >= 400 ? err.statusCode : 500
  if (err.code === 'FST_CSRF_INVALID_TOKEN' || err.code === 'FST_CSRF_MISSING_SECRET') {
    return { status: 403, title: 'Form expired', message: 'This form was not sent from this site, or it has expired. Go back, reload the page and try again.' }
  }
  if (status === 429) return { status, title: 'Too many attempts', message: err.message }
  if (status >= 500) return { status, title: 'Something went wrong', message: 'The server had an error. Try again in a moment.' }
  return { status, title: 'Request refused', message: err.message }
}

export async function dashboard (app: FastifyInstance, opts: DashboardOptions): Promise<void> {
  const { config } = opts
  // Signs the CSRF secret's cookie. One value for every replica: from SESSION_SECRET, or
  // made once and kept in the shared database.
  const cookieSecret = config.sessionSecret ?? await sharedSetting(opts.db, 'cookie_secret', () => randomBytes(32).toString('base64url'))

  // The pages are not the API: /docs lists none of them (the admin pages least of all).
  app.addHook('onRoute', route => { route.schema = { ...route.schema, hide: true } })

  await securityHeaders(app)
  await app.register(cookie, { secret: cookieSecret })
  await csrfProtection(app, { cookieSecret, secure: config.cookieSecure })
  await app.register(formbody, { bodyLimit: 16 * 1024 })
  await app.register(rateLimit, {
    global: false,
    ...(opts.redis ? { redis: opts.redis, nameSpace: `${config.redisPrefix}login:` } : {}),
  })
  await app.register(view, {
    engine: { eta: new Eta({ views: join(HERE, 'views'), autoEscape: true, cache: true }) },
    templates: join(HERE, 'views'),
    viewExt: 'eta',
    defaultContext: { registrationOpen: config.registration === 'open' },
  })
  await app.register(fastifyStatic, {
    root: join(HERE, 'assets'),
    prefix: '/assets/',
    // Assets are versioned by the release; an hour of caching is enough and needs no build step.
    maxAge: 3600 * 1000,
  })

  app.decorateRequest('user', null)
  app.addHook('preHandler', async request => {
    const token = sessionToken(request)
    if (token) request.user = (await opts.sessions.account(token)) ?? null
  })
  app.addHook('onSend', async (request, reply, payload) => {
    // Pages show account data and, once, a new key: never keep them in any cache.
    if (!request.url.startsWith('/api/assets/')) reply.header('cache-control', 'no-store')
    return payload
  })

  app.setErrorHandler(async (err: FastifyError, request: FastifyRequest, reply: FastifyReply) => {
    const page = errorPage(err)
    if (page.status === 503) request.log.warn({ cause: err.message }, 'dashboard request refused: storage unavailable')
    else if (page.status >= 500) request.log.error({ err }, 'dashboard request failed')
    else request.log.info({ code: err.code, status: page.status }, redactSecretLooking(err.message))
    return reply.code(page.status).headers(page.headers ?? {}).view('error', { title: page.title, message: page.message, user: request.user })
  })

  // Fastify hands the register options (prefix included) to the plugin; pass on only ours,
  // or the child plugins would add the prefix a second time.
  const { accounts, sessions, limiter, usage, db, models, redis } = opts
  const deps: DashboardDeps = { accounts, sessions, limiter, usage, db, models, redis, config, loginLimit: { max: config.loginAttemptsPerMinute, timeWindow: 60_000 } }
  await app.register(accountRoutes, deps)
  await app.register(keyRoutes, deps)
  await app.register(adminRoutes, deps)
}
