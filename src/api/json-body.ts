// The API's JSON body parser. Fastify's own refuses the same bodies but
// answers every one with the same "not valid JSON": also a well-formed body
// that it refuses for a "__proto__" or "constructor.prototype" key, and without
// saying where a real syntax error is. This one says which it was (the
// fuzzer's finding): JSON.parse's own message (position or the offending
// text), or the key that is refused.
//
// Those keys are refused, not dropped, as Fastify does by default: code that
// copies the body with Object.assign or a spread would otherwise set the
// prototype of the copy (prototype pollution).

import type { FastifyInstance, FastifyRequest } from 'fastify'
import { ApiError } from '../errors.ts'

export function installJsonBodyParser (api: FastifyInstance): void {
  api.removeContentTypeParser('application/json')
  api.addContentTypeParser('application/json', { parseAs: 'string' }, (_request: FastifyRequest, body: string | Buffer, done: (err: Error | null, value?: unknown) => void) => {
    try {
      done(null, parseJsonBody(typeof body === 'string' ? body : body.toString('utf8')))
    } catch (err) {
      done(err as Error)
    }
  })
}

/** The parsed body, or an ApiError saying what is wrong with it. */
export function parseJsonBody (text: string): unknown {
  if (text.trim() === '') throw new ApiError('invalid_json', 'The request body is empty; send a JSON object.')
  let value: unknown
  try {
    value = JSON.parse(text)
  } catch (err) {
    throw new ApiError('invalid_json', `The request body is not valid JSON: ${(err as Error).message}.`)
  }
  const key = forbiddenKey(value)
  if (key !== undefined) {
    throw new ApiError('invalid_parameter', `The request body has a "${key}" key, which is not accepted anywhere in a request.`, { param: null })
  }
  return value
}

/**
 * `__proto__`, or `constructor.prototype`, if the value holds either at any
 * depth. An explicit stack, not recursion: bodies may nest very deep.
 */
function forbiddenKey (value: unknown): string | undefined {
  const stack: unknown[] = [value]
  while (stack.length > 0) {
    const node = stack.pop()
    if (typeof node !== 'object' || node === null) continue
    if (Array.isArray(node)) {
      for (const item of node) stack.push(item)
      continue
    }
    if (Object.hasOwn(node, '__proto__')) return '__proto__'
    const record = node as Record<string, unknown>
    const ctor = Object.hasOwn(record, 'constructor') ? record.constructor : undefined
    if (typeof ctor === 'object' && ctor !== null && Object.hasOwn(ctor, 'prototype')) return 'constructor.prototype'
    for (const key of Object.keys(record)) stack.push(record[key])
  }
  return undefined
}
