// The API's JSON body parser: a syntax error says where, an empty body says
// so, and a "__proto__" or "constructor.prototype" key anywhere is refused by
// name (not as "not valid JSON", which it is); a body nested deeper than
// JSON_MAX_DEPTH is refused before it is parsed; everything else parses as
// JSON.parse does.
import fc from 'fast-check'
import t from 'tap'
import { nestsDeeperThan } from '../../src/api/json-body.ts'
import { buildTestApp, chatBody } from '../helpers/app.ts'
import { FUZZ_SEED, fuzzParameters, fuzzRuns, prototypeIsClean } from '../helpers/fuzz.ts'

const URL = '/api/v1/chat/completions'

t.test('refusals say what is wrong', async t => {
  const { app, auth } = await buildTestApp(t)
  const post = (payload: string) => app.inject({ method: 'POST', url: URL, headers: { ...auth, 'content-type': 'application/json' }, payload })

  const cut = await post('{"model":"scripted","messages":[')
  t.equal(cut.statusCode, 400)
  t.same(cut.json().error, { message: 'The request body is not valid JSON: Unexpected end of JSON input.', type: 'invalid_request_error', param: null, code: 'invalid_json' })
  t.match((await post('{"model":"scripted"} x')).json().error.message, /not valid JSON: .*position 21/)
  t.match((await post('{"temperature":NaN}')).json().error.message, /not valid JSON: Unexpected token 'N'/)

  for (const empty of ['', '  \n']) {
    const res = await post(empty)
    t.equal(res.statusCode, 400)
    t.same(res.json().error, { message: 'The request body is empty; send a JSON object.', type: 'invalid_request_error', param: null, code: 'invalid_json' })
  }

  const valid = JSON.stringify(chatBody())
  for (const [where, body, key] of [
    ['top level', valid.replace('{', '{"__proto__":{"polluted":1},'), '__proto__'],
    ['in a message', valid.replace('{"role"', '{"__proto__":{"isAdmin":true},"role"'), '__proto__'],
    ['constructor.prototype', valid.replace('{', '{"constructor":{"prototype":{"polluted":1}},'), 'constructor.prototype'],
    ['deep in an unknown field', valid.replace('{', '{"x":[[{"a":{"__proto__":null}}]],'), '__proto__'],
  ]) {
    const res = await post(body)
    t.equal(res.statusCode, 400, where)
    t.same(res.json().error, { message: `The request body has a "${key}" key, which is not accepted anywhere in a request.`, type: 'invalid_request_error', param: null, code: 'invalid_parameter' }, where)
  }
  t.ok(prototypeIsClean())
})

t.test('a body nested deeper than JSON_MAX_DEPTH is refused before it is parsed', async t => {
  const { app, auth } = await buildTestApp(t, { env: { JSON_MAX_DEPTH: '16' } })
  const post = (payload: string) => app.inject({ method: 'POST', url: URL, headers: { ...auth, 'content-type': 'application/json' }, payload })
  const refusal = { message: 'The request body nests arrays and objects more than 16 levels deep (JSON_MAX_DEPTH).', type: 'invalid_request_error', param: null, code: 'invalid_json' }

  // The probe's body: a megabyte of arrays 520,000 deep, with a model nobody serves.
  const hostile = `{"model":"nope","messages":${'['.repeat(520_000)}${']'.repeat(520_000)}}`
  const res = await post(hostile)
  t.equal(res.statusCode, 400)
  t.same(res.json().error, refusal, 'refused for its depth, not parsed as far as the unknown model')
  // Unbalanced, or not JSON at all past the point where it is too deep: still the depth refusal.
  t.same((await post('{"a":' + '{"b":'.repeat(100))).json().error, refusal)
  t.same((await post(JSON.stringify(chatBody({ x: JSON.parse('['.repeat(16) + ']'.repeat(16)) })))).json().error, refusal, '17 levels with the body itself')
  t.equal((await post(JSON.stringify(chatBody({ x: JSON.parse('['.repeat(15) + ']'.repeat(15)) })))).statusCode, 200, '16 levels with the body itself')

  t.equal(nestsDeeperThan('[[1]]', 2), false)
  t.equal(nestsDeeperThan('[[[1]]]', 2), true)
  t.equal(nestsDeeperThan(String.raw`[["[[[", "\\"]]`, 2), false, 'a string ending in an escaped backslash closes')
  t.equal(nestsDeeperThan(String.raw`[["\"", [[1]]]]`, 3), true, 'an escaped quote does not close a string')
  t.equal(nestsDeeperThan('[{"a":[]},{"b":[]}]', 3), false, 'siblings do not add up')
})

t.test('what parses still parses', async t => {
  const { app, auth } = await buildTestApp(t)
  const post = (payload: string, type = 'application/json') => app.inject({ method: 'POST', url: URL, headers: { ...auth, 'content-type': type }, payload })
  t.equal((await post(JSON.stringify(chatBody({ user: 'constructor', constructor: 'x', prototype: { a: 1 } })))).statusCode, 200, 'the words themselves are fine')
  t.equal((await post(JSON.stringify(chatBody()), 'application/json; charset=utf-8')).statusCode, 200)
  // The body itself is one level; 63 more stay within the default JSON_MAX_DEPTH of 64.
  const deep = '['.repeat(63) + ']'.repeat(63)
  t.equal((await post(JSON.stringify(chatBody()).replace('{', `{"x":${deep},`))).statusCode, 200, 'nesting up to JSON_MAX_DEPTH in an ignored field')
  t.equal((await post(JSON.stringify(chatBody({ x: '[[[[{{{{'.repeat(1000) })))).statusCode, 200, 'brackets inside a string do not count')
  t.equal((await post(JSON.stringify(chatBody({ x: '\\"[[[['.repeat(100) })))).statusCode, 200, 'nor after escaped quotes and backslashes')
  const dup = await post('{"model":"nope","model":"scripted","messages":[{"role":"user","content":"hi"}]}')
  t.equal(dup.statusCode, 200, 'a duplicate key: the last one wins, as in JSON.parse')
})

t.test('the depth scan agrees with the real nesting of any JSON value', async t => {
  const depthOf = (value: unknown): number => typeof value === 'object' && value !== null
    ? 1 + Math.max(0, ...Object.values(value).map(depthOf))
    : 0
  const text = fc.string({ unit: fc.constantFrom('"', '\\', '[', ']', '{', '}', 'a', '\u00e9', '\ud83d\ude00', ' ') })
  const value = fc.letrec(tie => ({
    node: fc.oneof({ depthSize: 'small', withCrossShrink: true }, text, fc.integer(), fc.constant(null), tie('array'), tie('object')),
    array: fc.array(tie('node'), { maxLength: 4 }),
    object: fc.dictionary(text, tie('node'), { maxKeys: 4 }),
  })).node
  fc.assert(fc.property(value, fc.integer({ min: 0, max: 8 }), (v, max) => nestsDeeperThan(JSON.stringify(v), max) === (depthOf(v) > max)), fuzzParameters(fuzzRuns(2000)))
  t.pass(`agreed on ${fuzzRuns(2000)} values, seed ${FUZZ_SEED}`)
})
