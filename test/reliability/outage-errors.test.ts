// Which failures count as a store outage (503 with Retry-After) and which are
// bugs (500): the classifiers behind database_unavailable and
// limits_unavailable, on the errors pg, node:sqlite and ioredis really throw.

import { DatabaseSync } from 'node:sqlite'
import t from 'tap'
import { toApiError } from '../../src/api/error-handler.ts'
import { isRedisUnavailable } from '../../src/limits/unavailable.ts'
import { isDatabaseUnavailable } from '../../src/store/unavailable.ts'

const withCode = (message: string, code: string): Error => Object.assign(new Error(message), { code })

t.test('PostgreSQL and network failures are outages; query errors are not', async t => {
  const outages = [
    withCode('connect ECONNREFUSED 127.0.0.1:5432', 'ECONNREFUSED'),
    withCode('read ECONNRESET', 'ECONNRESET'),
    new AggregateError([withCode('connect ECONNREFUSED ::1:5432', 'ECONNREFUSED'), withCode('connect ECONNREFUSED 127.0.0.1:5432', 'ECONNREFUSED')]),
    new Error('Connection terminated unexpectedly'),
    new Error('Connection terminated due to connection timeout', { cause: new Error('Connection terminated unexpectedly') }),
    new Error('timeout exceeded when trying to connect'),
    new Error('Query read timeout'),
    new Error('Client has encountered a connection error and is not queryable'),
    withCode('terminating connection due to administrator command', '57P01'),
    withCode('the database system is starting up', '57P03'),
    withCode('sorry, too many clients already', '53300'),
    withCode('could not extend file: No space left on device', '53100'),
    withCode('canceling statement due to statement timeout', '57014'),
    withCode('cannot execute INSERT in a read-only transaction', '25006'),
    withCode('connection failure', '08006'),
  ]
  for (const err of outages) t.ok(isDatabaseUnavailable(err), err.message)
  const bugs = [
    withCode('duplicate key value violates unique constraint', '23505'),
    withCode('syntax error at or near "SELEC"', '42601'),
    withCode('relation "nope" does not exist', '42P01'),
    new TypeError('cannot read properties of undefined'),
    new Error('driver has already been destroyed'),
  ]
  for (const err of bugs) t.notOk(isDatabaseUnavailable(err), err.message)
  t.notOk(isDatabaseUnavailable('ECONNREFUSED'), 'only errors')
})

t.test('SQLite: a database locked past busy_timeout is an outage; a constraint is not', async t => {
  const path = `${t.testdir()}/locked.db`
  const holder = new DatabaseSync(path)
  holder.exec('PRAGMA journal_mode = WAL; CREATE TABLE x (id INTEGER PRIMARY KEY, v TEXT UNIQUE)')
  const other = new DatabaseSync(path)
  other.exec('PRAGMA busy_timeout = 0')
  holder.exec('BEGIN IMMEDIATE; INSERT INTO x (v) VALUES (\'a\')')
  const busy = t.throws(() => other.exec('INSERT INTO x (v) VALUES (\'b\')')) as Error
  t.ok(isDatabaseUnavailable(busy), `SQLITE_BUSY: ${busy.message}`)
  holder.exec('COMMIT')
  const unique = t.throws(() => other.exec('INSERT INTO x (v) VALUES (\'a\')')) as Error
  t.notOk(isDatabaseUnavailable(unique), `constraint: ${unique.message}`)
  holder.close()
  other.close()
})

t.test('Redis: lost connections, timeouts and a Redis that cannot serve yet are outages', async t => {
  const outages = [
    new Error('Connection is closed.'),
    new Error('Command timed out'),
    new Error('Stream isn\'t writeable and enableOfflineQueue options is false'),
    Object.defineProperty(new Error('Reached the max retries per request limit (which is 1). Refer to "maxRetriesPerRequest" option for details.'), 'name', { value: 'MaxRetriesPerRequestError' }),
    withCode('connect ECONNREFUSED 127.0.0.1:6379', 'ECONNREFUSED'),
    new Error('LOADING Redis is loading the dataset in memory'),
    new Error('READONLY You can\'t write against a read only replica.'),
  ]
  for (const err of outages) t.ok(isRedisUnavailable(err), err.message)
  for (const err of [new Error('ERR wrong number of arguments for \'evalsha\' command'), new Error('NOSCRIPT No matching script')]) {
    t.notOk(isRedisUnavailable(err), err.message)
  }
})

t.test('the API answers an outage with 503 and Retry-After, anything else with 500', async t => {
  t.match(toApiError(new Error('Connection terminated unexpectedly')), { status: 503, code: 'database_unavailable', type: 'server_error', headers: { 'retry-after': '1' } })
  t.match(toApiError(new Error('Connection is closed.')), { status: 503, code: 'limits_unavailable', headers: { 'retry-after': '1' } })
  t.match(toApiError(withCode('duplicate key value violates unique constraint', '23505')), { status: 500, code: 'internal_error' })
})
