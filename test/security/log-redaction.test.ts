// The logger options by themselves (src/logging.ts): what any code that logs
// gets redacted, without a server around it. secrets.test.ts checks the same
// through a whole session.

import { Writable } from 'node:stream'
import t from 'tap'
import pino from 'pino'
import { loggableUrl, loggerOptions, maskApiKeys } from '../../src/logging.ts'

const KEY = 'sk-chatd-AbCdEf0123456789abcdefghijklmnop'

function capture (): { logger: pino.Logger; lines: () => Array<Record<string, unknown>>; text: () => string } {
  let text = ''
  const stream = new Writable({ write (chunk, _encoding, done) { text += String(chunk); done() } })
  const logger = pino(loggerOptions('trace', stream) as pino.LoggerOptions, stream)
  return { logger, text: () => text, lines: () => text.split('\n').filter(Boolean).map(line => JSON.parse(line)) }
}

t.test('loggableUrl keeps the path and the parameter names, never a value', async t => {
  t.equal(loggableUrl('/api/v1/models'), '/api/v1/models')
  t.equal(loggableUrl(`/api/v1/models?api_key=${KEY}`), '/api/v1/models?api_key=[Redacted]')
  t.equal(loggableUrl('/api?done=revoked&token=abc&&x'), '/api?done=[Redacted]&token=[Redacted]&x=[Redacted]')
  t.equal(loggableUrl('/api?'), '/api?')
})

t.test('maskApiKeys cuts every chatd key in a line to its prefix, and leaves the rest alone', async t => {
  t.equal(maskApiKeys(`{"msg":"The model '${KEY}' does not exist","other":"${KEY}"}`), '{"msg":"The model \'sk-chatd-AbCdEf…\' does not exist","other":"sk-chatd-AbCdEf…"}')
  t.equal(maskApiKeys('sk-chatd-AbCdEf… is listed by its prefix'), 'sk-chatd-AbCdEf… is listed by its prefix')
  t.equal(maskApiKeys('no key here'), 'no key here')
})

t.test('whatever is logged, credentials come out redacted or cut', async t => {
  const { logger, lines, text } = capture()
  logger.info({ req: { headers: { authorization: `Bearer ${KEY}` } } }, 'a bare request-like object')
  logger.info({ headers: { authorization: `Bearer ${KEY}`, cookie: 'chatd_session=abc', 'x-api-key': KEY } }, 'headers')
  logger.info({ password: 'hunter2 hunter2', token: 'session-token', apiKey: 'upstream-key', key: KEY }, 'fields')
  logger.warn(new Error(`refused ${KEY}`))
  logger.trace(`a message naming ${KEY}`)
  const logged = lines()
  t.equal(logged.length, 5, 'a request-like object without a URL is logged, not thrown on')
  t.same(logged[1].headers, { authorization: '[Redacted]', cookie: '[Redacted]', 'x-api-key': '[Redacted]' })
  t.match(logged[2], { password: '[Redacted]', token: '[Redacted]', apiKey: '[Redacted]', key: '[Redacted]' })
  t.notMatch(text(), KEY.slice(15), 'the secret part of the key is nowhere, not in an error\'s message or stack either')
  t.notMatch(text(), /hunter2|session-token|upstream-key|chatd_session=abc/)
  t.match(logged[4].msg, 'sk-chatd-AbCdEf…')
})
