// buildApp: the Fastify application with every plugin registered in a fixed
// order. It takes its collaborators (accounts over the store, the model
// registry, metrics) ready-made, so tests can build it around a temp database
// and in-test backends, and server.ts decides how they are opened and closed.

import { randomBytes } from 'node:crypto'
import Fastify, { type FastifyInstance, type FastifyServerOptions, type RouteOptions } from 'fastify'
import swagger from '@fastify/swagger'
import swaggerUi from '@fastify/swagger-ui'
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox'
import type { Redis } from 'ioredis'
import type { Accounts } from './accounts/accounts.ts'
import { Sessions } from './accounts/sessions.ts'
import { Tiers } from './accounts/tiers.ts'
import { drainUsage, logUnwrittenUsage } from './accounts/unwritten-usage.ts'
import { UsageRecords, UsageRetention } from './accounts/usage-records.ts'
import { bearerAuth } from './api/auth.ts'
import { installBaselineHeaders } from './api/baseline-headers.ts'
import { ConnectionGuard, frameworkErrors, timeoutOptions } from './api/connections.ts'
import { DEFAULT_INPUT_LIMITS } from './api/pipeline/input-limits.ts'
import { CompletionPipeline } from './api/pipeline/pipeline.ts'
import { chatRoute } from './api/chat/route.ts'
import { messagesRoute } from './api/messages/route.ts'
import { ReasoningSeal } from './api/reasoning-seal.ts'
import { responsesRoute } from './api/responses/route.ts'
import type { ResponseStorePort } from './api/responses/store-port.ts'
import { storedResponsesRoutes } from './api/responses/stored-routes.ts'
import { installDraining } from './api/draining.ts'
import { installErrorHandling } from './api/error-handler.ts'
import { healthRoutes } from './api/health/route.ts'
import { installJsonBodyParser } from './api/json-body.ts'
import { Metrics } from './api/metrics/metrics.ts'
import { metricsRoute } from './api/metrics/route.ts'
import { modelsRoute } from './api/models/route.ts'
import { registerMeters } from './api/meters.ts'
import { meterReads } from './api/reads.ts'
import { meterRefusals } from './api/refusals.ts'
import { usageRoute } from './api/usage/route.ts'
import { installTracing, traced } from './api/tracing/hooks.ts'
import { Tracing } from './api/tracing/tracing.ts'
import { DEFAULT_CONNECTION_LIMITS, DEFAULT_KEY_ALLOWANCE, DEFAULT_STORED_RESPONSE_LIMITS, DEFAULT_TIERS_FILE, type Config } from './config.ts'
import { dashboard } from './dashboard/plugin.ts'
import { docsSecurityHeaders } from './dashboard/security-headers.ts'
import type { ModelRegistry } from './engine/registry.ts'
import { Limiter } from './limits/limiter.ts'
import { openLimitStore } from './limits/open-store.ts'
import { loggerOptions } from './logging.ts'
import { ResponseRetention } from './responses/retention.ts'
import { StoredResponses } from './responses/stored-responses.ts'
import { sharedSetting } from './store/settings.ts'
import { WebSearch } from './search/web-search.ts'

export interface AppOptions {
  config: Pick<Config, 'logLevel' | 'bodyLimit' | 'sseKeepAliveMs' | 'queueSize'> & Partial<Pick<Config, 'trustProxy' | 'search' | 'inputLimits'>>
    & Partial<Pick<Config, 'tiersFile' | 'redisUrl' | 'redisPrefix' | 'registration' | 'cookieSecure' | 'loginAttemptsPerMinute' | 'sessionSecret' | 'keyAllowance'>>
    & Partial<Pick<Config, 'shutdownGraceMs' | 'connections' | 'jsonMaxDepth' | 'refusedPerMinute' | 'readsPerAccountPerMinute' | 'storedResponses' | 'usageRetentionDays'>>
    & Partial<Pick<Config, 'metrics' | 'tracing'>>
  accounts: Accounts
  models: ModelRegistry
  /** By default made from config.metrics. */
  metrics?: Metrics
  /** Traces; by default started from config.tracing (none when it is unset), and shut down with the app. */
  tracing?: Tracing
  /**
   * Tier limits. By default: the tiers of config.tiersFile (tiers.json) over
   * the in-process store, or over Redis when config.redisUrl is set; closed
   * with the app.
   */
  limiter?: Limiter
  /**
   * The usage records the chat route writes. By default made here over
   * accounts.database and drained when the app closes; a caller that passes
   * its own drains it (server.ts does, before it closes the database).
   */
  usage?: UsageRecords
  /** Overrides the logger built from config.logLevel (tests pass false). */
  logger?: FastifyServerOptions['logger']
  /** Where the built-in logger writes; stdout by default. */
  logStream?: NodeJS.WritableStream
  /** Told of every route as it is registered (the security tests check each one has an access rule). */
  onRoute?: (route: RouteOptions) => void
  /** Where POST /responses keeps finished responses (previous_response_id); none: nothing is stored. */
  responseStore?: ResponseStorePort
}

/** A hop count as the function Fastify applies to numbers itself (its types accept only the other forms). */
function trustProxyOption (value: boolean | number | string[]): boolean | string[] | ((address: string, hop: number) => boolean) {
  return typeof value === 'number' ? (_address, hop) => hop < value : value
}

export async function buildApp (opts: AppOptions): Promise<FastifyInstance> {
  const { config, accounts, models } = opts
  const metrics = opts.metrics ?? new Metrics({ familyPrefix: config.metrics?.familyPrefix, accountsTop: config.metrics?.accountsTop })
  // Read before anything opens, so a bad tiers file stops the start with its message.
  const tiers = opts.limiter ? undefined : Tiers.fromFile(config.tiersFile ?? DEFAULT_TIERS_FILE)

  // Receiving a request is bounded (headers, then the whole body, idle
  // keep-alive), as is the number of connections; a response is not, so a
  // stream may take minutes (api/connections.ts).
  const connections = config.connections ?? DEFAULT_CONNECTION_LIMITS
  const guard = new ConnectionGuard(connections, {
    // Behind a proxy every connection comes from the proxy: a per-address cap would cap the proxy.
    perAddress: (config.trustProxy ?? false) === false,
    onRefused: code => metrics.errors.inc({ code }),
  })

  const app = Fastify({
    logger: opts.logger ?? loggerOptions(config.logLevel, opts.logStream),
    bodyLimit: config.bodyLimit,
    ...timeoutOptions(connections),
    // A request Node's parser refuses, and a URL the router cannot take, get the API's error body.
    clientErrorHandler: guard.clientError,
    frameworkErrors,
    // TRUST_PROXY: behind a reverse proxy, request.ip (logs, rate limits) is the
    // client from X-Forwarded-For rather than the proxy's own address.
    trustProxy: trustProxyOption(config.trustProxy ?? false),
    return503OnClosing: false, // see the onRequest hook in step 3
    ajv: {
      customOptions: {
        // Fastify coerces by default ("0.5" -> 0.5); the API promises 400 for a
        // wrong JSON type, so bodies are checked exactly as sent.
        coerceTypes: false,
        allErrors: false,
      },
    },
  }).withTypeProvider<TypeBoxTypeProvider>()
  guard.attach(app)

  const usage = opts.usage ?? new UsageRecords(accounts.database, { outbox: { onGiveUp: (row, reason) => logUnwrittenUsage(app.log, row, reason) } })
  // Requests' usage records older than USAGE_RECORDS_RETENTION_DAYS removed hourly (the day totals stay).
  const usageRetention = new UsageRetention(usage, { retentionDays: config.usageRetentionDays ?? 0, log: app.log })
  usageRetention.start()
  app.addHook('onClose', () => usageRetention.stop())
  if (!opts.usage) app.addHook('onClose', () => drainUsage(usage, app.log))

  if (opts.onRoute) app.addHook('onRoute', opts.onRoute)

  // Tracing (OTEL_EXPORTER_OTLP_ENDPOINT): off by default, and then the SDK is never loaded.
  let tracing = opts.tracing
  if (!tracing && config.tracing) {
    const started = await Tracing.start(config.tracing)
    tracing = started
    app.addHook('onClose', () => started.shutdown())
  }

  // 1. Every error, whoever throws it, leaves as the one error body; every
  // response, error or not, carries the baseline security headers.
  installErrorHandling(app, metrics)
  installBaselineHeaders(app)
  // JSON refusals that say what is wrong: where the syntax breaks, or which key
  // is refused; a body nested deeper than JSON_MAX_DEPTH is refused before it is
  // parsed. For every route, so no JSON body anywhere is parsed without the limit.
  installJsonBodyParser(app, { maxDepth: config.jsonMaxDepth })

  // 2. Request counting for every route, including 404s.
  app.addHook('onResponse', async (request, reply) => {
    metrics.httpRequests.inc({ route: request.routeOptions.url ?? 'unmatched', method: request.method, status: String(reply.statusCode) })
  })

  // 3. Draining on close: finished responses close their connections, new requests get 503,
  // and SHUTDOWN_GRACE_MS bounds the wait (api/draining.ts).
  const drainDeadline = installDraining(app, { shutdownGraceMs: config.shutdownGraceMs })

  // 4. Where the limits live: in-process, or Redis shared by every replica.
  let limiter = opts.limiter
  let redis: Redis | undefined
  if (!limiter) {
    const opened = await openLimitStore({ redisUrl: config.redisUrl, redisPrefix: config.redisPrefix ?? 'chatd:' })
    app.addHook('onClose', () => opened.close())
    limiter = new Limiter({ tiers: tiers!, store: opened.store, usage })
    redis = opened.redis
  }
  const limits = { limiter, usage }

  // Stored responses (the Responses API's store: true), in the database; expired ones removed hourly.
  const storedLimits = config.storedResponses ?? DEFAULT_STORED_RESPONSE_LIMITS
  const storedResponses = new StoredResponses(accounts.database, { limits: storedLimits, log: app.log })
  const retention = new ResponseRetention(storedResponses, { retentionDays: storedLimits.retentionDays, log: app.log })
  retention.start()
  app.addHook('onClose', () => retention.stop())

  // 5. OpenAPI, collected from the route schemas registered after it.
  await app.register(swagger, {
    openapi: {
      openapi: '3.1.0',
      info: { title: 'chatd', description: 'Self-hostable chat-completions API', version: '1' },
      components: { securitySchemes: { bearerAuth: { type: 'http', scheme: 'bearer', description: 'sk-chatd-... API key' } } },
    },
  })
  // The docs pages get the dashboard's security headers, with a CSP that lets
  // swagger-ui's own assets (and their data: icons) load and nothing else.
  await app.register(async docs => {
    await docsSecurityHeaders(docs)
    // The document is fixed once the routes are registered: it is serialised once, on its first
    // request, not on each (~70 KB, ~0.9 ms of the main thread per request, open to anyone).
    let document: Buffer | undefined
    docs.addHook('onRoute', route => {
      if (route.url === '/docs/json' && route.method === 'GET') {
        route.handler = async (_request, reply) => reply.type('application/json; charset=utf-8').send(document ??= Buffer.from(JSON.stringify(app.swagger())))
      }
    })
    await docs.register(swaggerUi, { routePrefix: '/docs' })
  })

  // 6. Unauthenticated operational endpoints.
  await app.register(healthRoutes, { models })
  // On a listener of its own instead with METRICS_PORT (server.ts); behind METRICS_TOKEN when set.
  if (!config.metrics?.listen) await app.register(metricsRoute, { metrics, token: config.metrics?.token })
  // chatd_engine_sequences and the engines' serving figures: what each local engine reports, read at scrape time.
  metrics.watchEngines(() => models.list().flatMap(m => {
    const sequences = m.backend.activeSequences
    return sequences === undefined ? [] : [{ model: m.id, sequences, device: m.backend.device, computedAhead: m.backend.promptTokensComputedAhead, grammar: m.backend.grammarCounts, stats: m.backend.engineStats }]
  }), () => models.list().map(m => m.id))
  for (const m of models.list()) m.backend.onEngineSteps?.(tokens => metrics.serving.steps(m.id, tokens))

  // 7. The API proper, behind Bearer keys.
  await app.register(async api => {
    // The API speaks JSON only; without this, Fastify's text/plain parser would
    // turn a plain-text body into a confusing validation error instead of 415.
    api.removeContentTypeParser('text/plain')
    api.decorateRequest('account', null)
    api.decorateRequest('apiKeyPrefix', null)
    // First of the hooks: one trace per request, from its arrival (api/tracing/hooks.ts).
    installTracing(api, tracing)
    // Refused requests are metered per key and per address; one over its
    // refusals is refused here, before its key is looked up or its body read.
    await registerMeters(api, { redis, redisPrefix: config.redisPrefix })
    meterRefusals(api, config.refusedPerMinute ?? { key: 0, address: 0 })
    api.addHook('onRequest', traced(tracing, 'auth', bearerAuth(accounts)))
    // Reads that count against no tier limit are metered per account, after the key is checked.
    meterReads(api, config.readsPerAccountPerMinute ?? 0)
    // Every authenticated response carries the account's x-ratelimit-* state; a chat
    // completion has set it already at admission, anything else reads it here.
    api.addHook('onSend', async (request, reply, payload) => {
      if (request.account && !reply.hasHeader('x-ratelimit-limit-requests') && !reply.hasHeader('x-ratelimit-limit-tokens')) {
        try {
          reply.headers(await limits.limiter.headersFor(request.account))
        } catch (err) {
          request.log.warn({ err }, 'could not read the rate-limit state for the response headers')
        }
      }
      return payload
    })
    // One pipeline behind every door: QUEUE_SIZE, limits and metering count all of them together.
    const pipeline = new CompletionPipeline({
      models,
      metrics,
      queueSize: config.queueSize,
      inputLimits: config.inputLimits ?? DEFAULT_INPUT_LIMITS,
      search: config.search ? WebSearch.fromSettings(config.search) : undefined,
      limits,
      drainDeadline,
      tracing,
    })
    await api.register(chatRoute, { pipeline, sseKeepAliveMs: config.sseKeepAliveMs })
    // Reasoning handed to clients to send back (Responses encrypted_content, Messages signatures):
    // sealed under a key every replica on the database shares.
    const reasoningSeal = new ReasoningSeal(await sharedSetting(accounts.database, 'reasoning_seal_secret', () => randomBytes(32).toString('base64url')))
    // The Responses API (Codex, the Agents SDK) and Anthropic's Messages API (Claude Code): the
    // same pipeline, each in its own shapes (api/responses/, api/messages/).
    await api.register(responsesRoute, { pipeline, reasoningSeal, stored: opts.responseStore ?? storedResponses, sseKeepAliveMs: config.sseKeepAliveMs })
    await api.register(messagesRoute, { pipeline, reasoningSeal, inputLimits: config.inputLimits ?? DEFAULT_INPUT_LIMITS, sseKeepAliveMs: config.sseKeepAliveMs })
    await api.register(modelsRoute, { models, limiter: limits.limiter })
    await api.register(usageRoute, limits)
    await api.register(storedResponsesRoutes, { stored: storedResponses, countRequest: (request, reply) => pipeline.countRequest(request, reply) })
  }, { prefix: '/api/v1' })

  // 8. The dashboard at /api: web pages behind a session cookie, with their own
  // security headers, CSRF checks and error pages (src/dashboard/plugin.ts).
  await app.register(dashboard, {
    prefix: '/api',
    accounts,
    sessions: new Sessions(accounts.database),
    limiter,
    usage,
    db: accounts.database,
    models,
    redis,
    config: {
      registration: config.registration ?? 'open',
      cookieSecure: config.cookieSecure ?? 'auto',
      loginAttemptsPerMinute: config.loginAttemptsPerMinute ?? 10,
      sessionSecret: config.sessionSecret,
      redisPrefix: config.redisPrefix ?? 'chatd:',
      keyAllowance: config.keyAllowance ?? DEFAULT_KEY_ALLOWANCE,
    },
  })

  return app
}
