// Generators of chat completion request bodies for the fuzz tests: fully
// valid bodies, almost valid ones (a valid body with one field changed or
// removed, so every branch of the validator is reached), arbitrary JSON, and
// raw JSON text that JSON.parse may or may not accept (duplicate keys, NaN,
// 1e999, deep nesting, broken UTF-8, prototype-pollution keys).

import fc from 'fast-check'
import { LANGUAGE_BY_CODE } from '../../src/prompt/languages.ts'
import { TONES } from '../../src/prompt/tones.ts'

/** Pieces of text that have broken parsers, tokenizers and templates elsewhere. */
export const trickyUnit = fc.constantFrom(
  'a', ' ', 'é', 'e\u0301', '日', '😀', '\n', '\r\n', '\t', '"', '\\', '/',
  '\uD800', '\uDBFF', '\uDC00', '\uDFFF', // lone surrogates
  '\u0000', '\u001F', '\u007F', '\uFEFF', '\u202E', '\u2028', '\uFDD0', '\uFDD1', '\uFFFF', '\uFFFD',
  '<s>', '</s>', '<unk>', '<｜User｜>', '<｜Assistant｜>', '<｜end▁of▁sentence｜>', '<｜begin▁of▁sentence｜>',
  '<think>', '</think>', '<|im_start|>', '<|im_end|>', '<|eos|>', '{{ bos_token }}', '{%', '%}', '${x}',
  '__proto__', 'constructor', 'NaN', 'Infinity'
)

/** Names and numbers-as-strings that code paths special-case. */
const SPECIAL_STRINGS = [
  '', ' ', 'NaN', 'Infinity', '-Infinity', '1e999', '-0', '0x10', '1_000', 'null', 'true', 'undefined',
  '__proto__', 'constructor', 'prototype', 'toString', 'valueOf', 'hasOwnProperty',
  'Default', 'default', 'English', 'en', 'scripted', 'scripted ', 'SCRIPTED', 'user', 'system', 'assistant', 'tool', 'text',
]

/** Up to ~1.1 MB of one repeated piece: around BODY_LIMIT and MAX_MESSAGE_CHARS. */
export const hugeString = fc.tuple(
  fc.constantFrom('x', ' ', 'ab ', '日', '😀', '\uD800', '</s>'),
  fc.oneof(fc.constantFrom(65536, 262144, 262145, 349525, 524288, 1048576), fc.integer({ min: 1, max: 1_100_000 }))
).map(([piece, chars]) => piece.repeat(Math.max(1, Math.ceil(chars / piece.length))))

export const trickyString = fc.oneof(
  { weight: 6, arbitrary: fc.string({ unit: trickyUnit, maxLength: 24 }) },
  { weight: 4, arbitrary: fc.string({ unit: 'binary', maxLength: 24 }) },
  { weight: 3, arbitrary: fc.constantFrom(...SPECIAL_STRINGS) },
  { weight: 1, arbitrary: hugeString }
)

export const trickyNumber = fc.oneof(
  fc.constantFrom(
    0, -0, 1, -1, 0.5, 1.5, 2, 2.0000000001, 1.9999999999, 3, 4, 5, 100000, 100001, 2 ** 31 - 1, 2 ** 31, 2 ** 32,
    Number.MAX_SAFE_INTEGER, 2 ** 53, 2 ** 53 + 2, 1e20, 1e21, 1e300, Number.MAX_VALUE, Number.MIN_VALUE, -Number.MIN_VALUE,
    -1e308, Number.EPSILON, -0.000001, NaN, Infinity, -Infinity // the last three serialize as null
  ),
  fc.integer(),
  fc.double()
)

/** Any JSON value, strings and keys tricky, a few levels deep. */
export const trickyJson: fc.Arbitrary<unknown> = fc.oneof(
  trickyString,
  trickyNumber,
  fc.boolean(),
  fc.constant(null),
  fc.jsonValue({ maxDepth: 3, stringUnit: trickyUnit }),
  fc.array(fc.constantFrom(null, 0, '', 'a', true, {}, []), { maxLength: 6 })
)

const contentText = fc.oneof(
  { weight: 5, arbitrary: fc.string({ unit: trickyUnit, maxLength: 40 }) },
  { weight: 3, arbitrary: fc.lorem({ maxCount: 12 }) },
  { weight: 2, arbitrary: fc.string({ unit: 'binary', maxLength: 40 }) }
)

const validMessage = fc.record({
  role: fc.constantFrom('user', 'assistant', 'system'),
  content: fc.oneof(
    { weight: 4, arbitrary: contentText },
    { weight: 1, arbitrary: fc.array(fc.record({ type: fc.constant('text'), text: contentText }), { maxLength: 4 }) }
  ),
})

const LANGUAGES = [...new Set([...LANGUAGE_BY_CODE.keys(), ...LANGUAGE_BY_CODE.values()])]

/** Every optional field with a value the API accepts (null where it means absent). */
const validOptional = {
  language: fc.oneof(fc.constant(null), fc.constantFrom(...LANGUAGES.slice(0, 40)), fc.constantFrom('english', ' French ', 'pt-BR', 'zh_Hant')),
  tone: fc.constantFrom(null, ...Object.keys(TONES), 'formal', 'CASUAL'),
  wordcount: fc.oneof(fc.constantFrom(null, 'Default'), fc.integer({ min: 1, max: 100000 })),
  stream: fc.constantFrom(null, true, false),
  temperature: fc.oneof(fc.constantFrom(null, 0, 2, Number.MIN_VALUE, 1e-300), fc.double({ min: 0, max: 2, noNaN: true })),
  top_p: fc.oneof(fc.constantFrom(null, 0, 1, Number.MIN_VALUE), fc.double({ min: 0, max: 1, noNaN: true })),
  top_k: fc.oneof(fc.constantFrom(null, 0, 1, Number.MAX_SAFE_INTEGER, 1e20), fc.nat()),
  max_tokens: fc.oneof(fc.constant(null), fc.constantFrom(1, 2, Number.MAX_SAFE_INTEGER, 1e20), fc.integer({ min: 1, max: 10 })),
  max_completion_tokens: fc.oneof(fc.constant(null), fc.integer({ min: 1, max: 10 })),
  stop: fc.oneof(fc.constant(null), fc.string({ unit: trickyUnit, minLength: 1, maxLength: 8 }), fc.array(fc.string({ unit: trickyUnit, minLength: 1, maxLength: 8 }), { maxLength: 4 })),
  seed: fc.oneof(fc.constant(null), fc.constantFrom(0, -1, 2 ** 32, Number.MAX_SAFE_INTEGER, -Number.MAX_SAFE_INTEGER, 1e20, -1e300), fc.integer()),
  stream_options: fc.oneof(fc.constant(null), fc.record({ include_usage: fc.constantFrom(null, true, false) }, { requiredKeys: [] })),
  n: fc.constantFrom(null, 1),
  presence_penalty: fc.oneof(fc.constant(null), fc.double({ min: -2, max: 2, noNaN: true })),
  frequency_penalty: fc.oneof(fc.constant(null), fc.double({ min: -2, max: 2, noNaN: true })),
  user: fc.oneof(fc.constant(null), fc.string({ unit: trickyUnit, maxLength: 20 }).filter(s => s.length <= 256)),
  googleSearchStatus: fc.constantFrom(null, false),
  logprobs: fc.constantFrom(null, true, false),
  // Only with logprobs: true (validBody drops it otherwise).
  top_logprobs: fc.oneof(fc.constant(null), fc.integer({ min: 0, max: 20 })),
  response_format: fc.oneof(
    fc.constantFrom(null, { type: 'text' }, { type: 'json_object' }),
    fc.record({
      type: fc.constant('json_schema'),
      json_schema: fc.record({
        name: fc.stringMatching(/^[A-Za-z0-9_-]{1,64}$/),
        schema: fc.constantFrom({ type: 'object' }, { type: 'object', properties: { a: { type: 'integer' } } }, { type: 'object', properties: { b: { enum: ['x', null] } }, required: ['b'] }),
        strict: fc.constantFrom(null, true, false),
        description: fc.string({ maxLength: 20 }),
      }, { requiredKeys: ['name'] }),
    })
  ),
}

/** A body the API must answer with 200, for the model `model`. */
export function validBody (model = 'scripted'): fc.Arbitrary<Record<string, unknown>> {
  return fc.record({
    model: fc.constant(model),
    messages: fc.array(validMessage, { minLength: 1, maxLength: 5 }),
    ...validOptional,
  }, { requiredKeys: ['model', 'messages'] }).map(body => {
    // top_logprobs above 0 needs logprobs: true.
    if (body.logprobs !== true && body.top_logprobs !== null && body.top_logprobs !== 0) delete body.top_logprobs
    return body
  })
}

/** Fields whose valid values depend on another: changing the key's field may make the listed fields the ones at fault. */
export const DEPENDENT_FIELDS: Record<string, string[]> = { logprobs: ['top_logprobs'] }

export interface Mutation {
  /** The field changed, in the API's param spelling (messages[0].role). */
  path: string
  body: Record<string, unknown>
}

const TOP_LEVEL = ['model', 'messages', ...Object.keys(validOptional), 'unknown_field', '__proto__', 'constructor']

/**
 * A valid body with one field replaced by an arbitrary value, or removed: the
 * answer is a 200 or a 4xx about that field.
 */
export function almostValidBody (model = 'scripted'): fc.Arbitrary<Mutation> {
  return fc.tuple(validBody(model), fc.nat(), fc.nat(), fc.nat(), fc.option(trickyJson, { nil: undefined, freq: 8 }))
    .map(([body, a, b, c, value]) => {
      const copy = structuredClone(body) as Record<string, any>
      const messages = copy.messages as Array<Record<string, any>>
      const i = a % messages.length
      const target = b % 6
      if (target === 0) {
        // A top-level field.
        const key = TOP_LEVEL[c % TOP_LEVEL.length]
        if (value === undefined) delete copy[key]
        else Object.defineProperty(copy, key, { value, enumerable: true, writable: true, configurable: true })
        return { path: key, body: copy }
      }
      if (target === 1) {
        messages[i] = value as any
        return { path: `messages[${i}]`, body: copy }
      }
      const message = messages[i]
      const key = target === 2 ? 'role' : target === 3 ? 'content' : target === 4 ? 'name' : '__proto__'
      if (Array.isArray(message.content) && message.content.length > 0 && target === 5) {
        const j = c % message.content.length
        const part = message.content[j]
        const partKey = c % 3 === 0 ? 'type' : c % 3 === 1 ? 'text' : undefined
        if (partKey === undefined) message.content[j] = value
        else if (value === undefined) delete part[partKey]
        else part[partKey] = value
        return { path: `messages[${i}].content[${j}]${partKey ? `.${partKey}` : ''}`, body: copy }
      }
      if (value === undefined) delete message[key]
      else Object.defineProperty(message, key, { value, enumerable: true, writable: true, configurable: true })
      return { path: `messages[${i}].${key}`, body: copy }
    })
}

/** Literal tokens that are not JSON numbers, or are numbers JSON.parse turns into something odd. */
const ODD_LITERALS = [
  'NaN', 'Infinity', '-Infinity', '1e999', '-1e999', '1e-999', '123456789012345678901234567890', '0x10', '01', '.5', '5.', '+1',
  '-0', '1E+2', 'true', 'false', 'null', 'undefined', '"\\ud800"', '"\\udfff\\ud800"', '"\\u0000"', '"\\uFDD0"', '[]', '{}', '"', "'x'",
]

const deepNesting = fc.tuple(fc.constantFrom('[', '{"a":'), fc.constantFrom(64, 1000, 10_000, 100_000, 300_000))
  .map(([open, depth]) => open.repeat(depth) + '0' + (open === '[' ? ']' : '}').repeat(depth))

const POLLUTION = [
  '"__proto__":{"polluted":1}', '"constructor":{"prototype":{"polluted":1}}', '"__proto__":{"isAdmin":true}',
  '"__proto__":null', '"prototype":{"polluted":1}',
]

/**
 * Raw request body bytes: the text of a valid or almost valid body, cut,
 * spliced, duplicated, wrapped or re-encoded.
 */
export function rawJsonBody (model = 'scripted'): fc.Arbitrary<Buffer> {
  const text = fc.oneof(validBody(model).map(b => JSON.stringify(b)), almostValidBody(model).map(m => JSON.stringify(m.body)))
  const fragment = fc.oneof(fc.constantFrom(...ODD_LITERALS), deepNesting, fc.constantFrom(...POLLUTION.map(p => `{${p}}`)), trickyJson.map(v => JSON.stringify(v) ?? 'null'))
  const key = fc.constantFrom('model', 'messages', 'stream', 'temperature', 'max_tokens', 'stop', 'seed', 'top_k', 'n', '__proto__', 'constructor', 'x')
  const edits: Array<fc.Arbitrary<(s: string) => string>> = [
    // Duplicate keys: first (the body's own value wins) or last (the new one wins).
    fc.tuple(key, fragment).map(([k, v]) => (s: string) => s.replace('{', `{"${k}":${v},`)),
    fc.tuple(key, fragment).map(([k, v]) => (s: string) => s.replace(/}$/, `,"${k}":${v}}`)),
    // A field's value replaced by an odd literal or a deep structure.
    fc.tuple(key, fragment).map(([k, v]) => (s: string) => s.replace(new RegExp(`"${k}":("[^"]*"|[^,}\\]]*)`), `"${k}":${v}`)),
    // Prototype-pollution keys at the top level and inside a message.
    fc.constantFrom(...POLLUTION).map(p => (s: string) => s.replace('{', `{${p},`)),
    fc.constantFrom(...POLLUTION).map(p => (s: string) => s.replace('{"role"', `{${p},"role"`)),
    // Broken text: cut short, a stray character, garbage around it.
    fc.nat().map(n => (s: string) => s.slice(0, n % (s.length + 1))),
    fc.tuple(fc.nat(), fc.constantFrom('{', '}', '[', ']', ',', ':', '"', '\\', '\u0000', '\uFEFF', '\n', ' ', 'x', '//', '/*')).map(([n, c]) => (s: string) => s.slice(0, n % (s.length + 1)) + c + s.slice(n % (s.length + 1))),
    fc.constantFrom('\uFEFF', ' \n\t', '[', 'null', '""', '0', '{}', '[]', 'true').map(p => (s: string) => p + s),
    fc.constantFrom('', ' ', '\n', ']', '}', ',', 'x', '{}', '\u0000').map(p => (s: string) => s + p),
    fc.constant((s: string) => `[${s}]`),
    fc.constant((s: string) => s + s),
    fc.constantFrom('null', '""', '0', '1e999', 'NaN', '[]', '{}', 'true', '"x"', '', ' ').map(whole => () => whole),
  ]
  const textBody = fc.tuple(text, fc.array(fc.oneof(...edits), { minLength: 1, maxLength: 3 }))
    .map(([s, fs]) => Buffer.from(fs.reduce((acc, f) => f(acc), s), 'utf8'))
  // Bytes that are not UTF-8, inside a string or anywhere.
  const brokenUtf8 = fc.tuple(text, fc.nat(), fc.constantFrom([0xff], [0xc3, 0x28], [0xe2, 0x82], [0xf0, 0x9f, 0x98], [0xc0, 0xaf], [0xed, 0xa0, 0x80], [0x00]))
    .map(([s, n, bytes]) => {
      const buf = Buffer.from(s, 'utf8')
      const at = n % (buf.length + 1)
      return Buffer.concat([buf.subarray(0, at), Buffer.from(bytes), buf.subarray(at)])
    })
  return fc.oneof({ weight: 5, arbitrary: textBody }, { weight: 1, arbitrary: brokenUtf8 })
}
