// The entry point: load config, read models.json, open the database, build the
// app (which reads the tiers file), listen, and only then, on a first start,
// create the admin account and print its key once: a start that fails for any
// reason prints no key that nobody can see again. Then load the models in the
// background, and on SIGTERM/SIGINT stop taking requests and drain the ones in
// flight (streams included) before exiting.

import closeWithGrace from 'close-with-grace'
import type { FastifyInstance } from 'fastify'
import { Accounts } from './accounts/accounts.ts'
import { ensureAdminAccount } from './accounts/bootstrap.ts'
import { drainUsage, logUnwrittenUsage } from './accounts/unwritten-usage.ts'
import { UsageRecords } from './accounts/usage-records.ts'
import { buildApp, type AppOptions } from './app.ts'
import { Metrics } from './api/metrics/metrics.ts'
import { metricsListener } from './api/metrics/route.ts'
import { ConfigError, loadConfig, type Config } from './config.ts'
import { ModelsFileError } from './engine/models-file.ts'
import { createOnnx, ModelRegistry, type BackendFactories } from './engine/registry.ts'
import { openMigratedDatabase } from './store/database.ts'
import { databaseOpenError } from './store/open-error.ts'

export interface StartOptions {
  /** Where the first start prints the admin key; stdout by default. */
  print?: (text: string) => void
  /** Environment for `${VAR}` in models.json; config.env (the environment over .env) by default. */
  env?: Record<string, string | undefined>
  /** Replaces backend factories (tests). */
  factories?: Partial<BackendFactories>
  logger?: AppOptions['logger']
  /** Where the built-in logger (redaction included) writes; stdout by default. */
  logStream?: AppOptions['logStream']
}

/** Opens everything and listens. Closing the returned app closes the models and the database too. */
export async function startServer (config: Config, opts: StartOptions = {}): Promise<FastifyInstance> {
  const print = opts.print ?? (text => { process.stdout.write(text) })
  // models.json first: a bad file stops the start before anything is opened.
  // Only a server that may have files to fetch loads the downloader.
  const onnx = config.autoPull ? (await import('./pull/auto-pull.ts')).withAutoPull(createOnnx) : createOnnx
  const models = await ModelRegistry.fromFile(config.modelsFile, { config, env: opts.env, factories: { onnx, ...opts.factories } })
  // The pool's idle-connection errors (the database restarted) are logged once the app's logger exists.
  let noteIdleError = (_err: Error): void => {}
  let db
  try {
    db = await openMigratedDatabase(config.database, { timeoutMs: config.databaseTimeoutMs, onIdleError: err => noteIdleError(err) })
  } catch (err) {
    await models.close()
    throw databaseOpenError(config.database, err)
  }
  let app: FastifyInstance | undefined
  try {
    const accounts = new Accounts(db)
    // Read before listening: an account registered in the moment between listening and
    // creating the admin must not make this start look like a later one.
    const firstStart = await accounts.count() === 0
    // Made here, not in buildApp, so the rows it still holds are drained before the database closes.
    // Set once the app is built; the outbox's callback above reads it only after that.
    // eslint-disable-next-line prefer-const
    let log: FastifyInstance['log'] | undefined
    const usage = new UsageRecords(db, { outbox: { onGiveUp: (row, reason) => { if (log) logUnwrittenUsage(log, row, reason) } } })
    // buildApp reads the tiers file: a bad or missing one stops the start here.
    const metrics = new Metrics({ familyPrefix: config.metrics.familyPrefix, accountsTop: config.metrics.accountsTop })
    const built = await buildApp({ config, accounts, models, usage, metrics, logger: opts.logger, logStream: opts.logStream })
    app = built
    log = built.log
    noteIdleError = err => built.log.warn({ err: err.message }, 'a pooled database connection was lost; the next query opens a new one')
    const database = db
    // Runs after Fastify has stopped listening and the in-flight requests have ended.
    built.addHook('onClose', async () => {
      await drainUsage(usage, built.log)
      await models.close()
      await database.destroy()
    })
    // METRICS_PORT: /metrics on a listener of its own, opened after the app's and closed with it.
    let metricsServer: FastifyInstance | undefined
    built.addHook('onClose', async () => { await metricsServer?.close() })
    await built.listen({ port: config.port, host: config.host })
    if (config.metrics.listen) {
      metricsServer = await metricsListener(metrics, { ...config.metrics.listen, token: config.metrics.token })
      built.log.info({ address: metricsServer.server.address() }, 'metrics listening (METRICS_PORT)')
    }
    // Only now that nothing else can stop the start is the admin's key made and shown.
    const admin = firstStart ? await ensureAdminAccount(accounts, { email: config.adminEmail, key: config.adminKey, firstStart }) : null
    if (admin) {
      // Printed, never logged: this is the one time the key can be seen.
      const dashboard = `For the dashboard at /api, give it a password: npx chatd accounts set-password --email ${admin.email}\n\n`
      print(admin.fromConfig
        ? `\nCreated admin account ${admin.email} with the key from CHATD_ADMIN_KEY.\n${dashboard}`
        : `\nCreated admin account ${admin.email}. Its API key (shown only now, keep it):\n\n    ${admin.key}\n\n${dashboard}`)
    }
    // Listening first, loading after: /healthz answers at once, /readyz says when models are ready.
    void models.loadAll(built.log)
    return built
  } catch (err) {
    if (app) {
      await app.close() // its onClose hook closes the models and the database
    } else {
      await models.close()
      await db.destroy()
    }
    throw err
  }
}

/**
 * How long after SHUTDOWN_GRACE_MS the process is killed if closing still has
 * not finished. The app itself ends what is in flight at the grace deadline
 * (api/drain-deadline.ts); this only catches a close that hangs past it.
 */
const SHUTDOWN_BACKSTOP_MS = 10_000

/**
 * Signals close-with-grace would listen for that do not drain: only SIGTERM and SIGINT do. A
 * JavaScript listener for a fault signal (SIGSEGV, SIGBUS, SIGFPE, SIGILL) replaces the default
 * action with one that returns to the faulting instruction: V8's WebAssembly trap handler then
 * turns an out-of-bounds access into the same fault raised forever, and the process spins
 * without listening or exiting. A fault must crash the process, so its supervisor restarts it.
 */
export const NOT_DRAINED: Array<'SIGHUP' | 'SIGQUIT' | 'SIGILL' | 'SIGTRAP' | 'SIGABRT' | 'SIGBUS' | 'SIGFPE' | 'SIGSEGV' | 'SIGUSR2'> =
  ['SIGHUP', 'SIGQUIT', 'SIGILL', 'SIGTRAP', 'SIGABRT', 'SIGBUS', 'SIGFPE', 'SIGSEGV', 'SIGUSR2']

/** `chatd serve`: the whole process lifecycle. */
export async function main (): Promise<void> {
  let config: Config
  let app: FastifyInstance
  try {
    config = loadConfig(process.env, { dotenv: true })
    app = await startServer(config)
  } catch (err) {
    if (err instanceof ConfigError || err instanceof ModelsFileError) {
      process.stderr.write(`chatd: ${err.message}\n`)
      process.exit(1)
    }
    const code = (err as NodeJS.ErrnoException).code
    if (code === 'EADDRINUSE' || code === 'EACCES' || code === 'EADDRNOTAVAIL') {
      process.stderr.write(`chatd: cannot listen on ${config!.host}:${config!.port}: ${(err as Error).message} (set PORT or HOST; METRICS_PORT or METRICS_HOST for the metrics listener)\n`)
      process.exit(1)
    }
    throw err
  }
  closeWithGrace({ delay: config.shutdownGraceMs + SHUTDOWN_BACKSTOP_MS, skip: NOT_DRAINED }, async ({ signal, err }) => {
    if (err) app.log.error({ err }, 'shutting down after an uncaught error')
    else app.log.info({ signal }, 'shutting down: draining in-flight requests')
    await app.close()
  })
}

if (import.meta.main) await main()
