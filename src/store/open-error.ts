// What `chatd serve` (and the CLI) say when the database DATABASE_URL names cannot
// be opened at start: one line that names the setting and where it points (never
// the URL's password), as REDIS_URL's does, instead of an uncaught stack trace.
// Only failures of the place itself (unreachable, refused, credentials, a path
// that cannot be written) become that line; a migration that fails on a reachable
// database is a bug and keeps its stack.

import { ConfigError, type Config } from '../config.ts'
import { isDatabaseUnavailable } from './unavailable.ts'

/** SQLSTATE 28: invalid authorization (wrong user or password); 3D000: no such database. */
const PG_SETTING_CODES = /^(28...|3D000)$/
/** The file system refused the SQLite path (or its folder). */
const FS_CODES = new Set(['EACCES', 'EPERM', 'EROFS', 'ENOENT', 'ENOTDIR', 'EISDIR', 'EEXIST'])

function where (database: Config['database']): string {
  if (database.kind === 'sqlite') return `the SQLite file ${database.path}`
  try {
    return `PostgreSQL at ${new URL(database.url).host}`
  } catch {
    return 'PostgreSQL'
  }
}

/** The innermost message: pg's refusals come wrapped (migration, AggregateError of each address). */
function rootMessage (err: unknown, depth = 0): string {
  const e = err as Error & { errors?: unknown[] }
  if (depth < 4 && e.cause instanceof Error) return rootMessage(e.cause, depth + 1)
  if (Array.isArray(e.errors) && e.errors.length > 0) return e.errors.map(inner => rootMessage(inner, depth + 1)).join('; ')
  return e.message || String(err)
}

function isSettingProblem (err: unknown, depth = 0): boolean {
  if (!(err instanceof Error) || depth > 4) return false
  const code = (err as Error & { code?: unknown }).code
  if (typeof code === 'string' && (PG_SETTING_CODES.test(code) || FS_CODES.has(code))) return true
  return isSettingProblem(err.cause, depth + 1)
}

/** A ConfigError naming DATABASE_URL when `err` is the database's place failing; `err` itself otherwise. */
export function databaseOpenError (database: Config['database'], err: unknown): unknown {
  if (!isDatabaseUnavailable(err) && !isSettingProblem(err)) return err
  return new ConfigError(`DATABASE_URL: cannot open the database (${where(database)}): ${rootMessage(err)}`)
}
