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
//
// A body nested deeper than JSON_MAX_DEPTH is refused before JSON.parse runs:
// one pass over the text counts the brackets outside strings, so a megabyte of
// "[[[[..." costs a scan, never the deep structure, its walk and its
// validation on the main thread, which every other stream shares.

import type { FastifyInstance, FastifyRequest } from 'fastify'
import { ApiError } from '../errors.ts'

/** JSON_MAX_DEPTH's default: chat bodies nest about 5 deep, JSON schemas in them a few more. */
export const DEFAULT_JSON_MAX_DEPTH = 64

/** Methods whose routes read no body. */
const BODYLESS_METHODS = new Set(['GET', 'HEAD', 'DELETE', 'OPTIONS'])

export function installJsonBodyParser (api: FastifyInstance, opts: { maxDepth?: number } = {}): void {
  const maxDepth = opts.maxDepth ?? DEFAULT_JSON_MAX_DEPTH
  api.removeContentTypeParser('application/json')
  api.addContentTypeParser('application/json', { parseAs: 'string' }, (request: FastifyRequest, body: string | Buffer, done: (err: Error | null, value?: unknown) => void) => {
    try {
      const text = typeof body === 'string' ? body : body.toString('utf8')
      // A method that takes no body (a DELETE, as the OpenAI SDK sends it, with a JSON content type) may send none.
      if (BODYLESS_METHODS.has(request.method) && text.trim() === '') {
        done(null, undefined)
        return
      }
      done(null, parseJsonBody(text, maxDepth))
    } catch (err) {
      done(err as Error)
    }
  })
}

/** The parsed body, or an ApiError saying what is wrong with it. */
export function parseJsonBody (text: string, maxDepth = DEFAULT_JSON_MAX_DEPTH): unknown {
  if (text.trim() === '') throw new ApiError('invalid_json', 'The request body is empty; send a JSON object.')
  if (nestsDeeperThan(text, maxDepth)) {
    throw new ApiError('invalid_json', `The request body nests arrays and objects more than ${maxDepth} levels deep (JSON_MAX_DEPTH).`)
  }
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
 * Whether the JSON text opens more than `maxDepth` arrays or objects at once,
 * counting only brackets outside strings. It does not check the syntax
 * (JSON.parse does that next); for valid JSON the count is the nesting depth.
 */
export function nestsDeeperThan (text: string, maxDepth: number): boolean {
  let depth = 0
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i)
    if (c === 0x22) {
      // Jump to the string's closing quote (indexOf is native, and strings are
      // most of a big body): the first quote after an even run of backslashes.
      let end = i
      for (;;) {
        end = text.indexOf('"', end + 1)
        if (end === -1) return false // unterminated: JSON.parse says so next
        let backslashes = 0
        while (text.charCodeAt(end - 1 - backslashes) === 0x5c) backslashes++
        if (backslashes % 2 === 0) break
      }
      i = end
    } else if (c === 0x5b || c === 0x7b) {
      if (++depth > maxDepth) return true
    } else if (c === 0x5d || c === 0x7d) {
      depth--
    }
  }
  return false
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
