// The API's JSON body parser: a syntax error says where, an empty body says
// so, and a "__proto__" or "constructor.prototype" key anywhere is refused by
// name (not as "not valid JSON", which it is); everything else parses as
// JSON.parse does, deep nesting included.
import t from 'tap'
import { buildTestApp, chatBody } from '../helpers/app.ts'
import { prototypeIsClean } from '../helpers/fuzz.ts'

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

t.test('what parses still parses', async t => {
  const { app, auth } = await buildTestApp(t)
  const post = (payload: string, type = 'application/json') => app.inject({ method: 'POST', url: URL, headers: { ...auth, 'content-type': type }, payload })
  t.equal((await post(JSON.stringify(chatBody({ user: 'constructor', constructor: 'x', prototype: { a: 1 } })))).statusCode, 200, 'the words themselves are fine')
  t.equal((await post(JSON.stringify(chatBody()), 'application/json; charset=utf-8')).statusCode, 200)
  const deep = '['.repeat(100_000) + ']'.repeat(100_000)
  t.equal((await post(JSON.stringify(chatBody()).replace('{', `{"x":${deep},`))).statusCode, 200, 'deep nesting in an ignored field')
  const dup = await post('{"model":"nope","model":"scripted","messages":[{"role":"user","content":"hi"}]}')
  t.equal(dup.statusCode, 200, 'a duplicate key: the last one wins, as in JSON.parse')
})
