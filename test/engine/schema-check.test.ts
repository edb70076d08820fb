// The schema check before admission: what it refuses (with a 400 naming
// response_format), what it lets through (real schemas, recursion with a way
// out, the deep chains the grammar workers deal with), what non-strict mode
// ignores, and its bounds on the largest and most tangled schemas.
import t from 'tap'
import type { ResponseFormat } from '../../src/engine/backend.ts'
import { checkResponseFormat, MAX_SCHEMA_NODES, MAX_SCHEMA_REFS } from '../../src/engine/schema-check.ts'
import { anyOfChain, refChain } from '../helpers/hostile-schemas.ts'

const format = (schema: Record<string, unknown>, strict = true): ResponseFormat => ({ type: 'json_schema', json_schema: { name: 'x', schema, strict } })
const refusal = (schema: Record<string, unknown>, strict = true): string | undefined => {
  try {
    checkResponseFormat(format(schema, strict))
    return undefined
  } catch (err) {
    t.match(err, { code: 'invalid_parameter', param: 'response_format', status: 400 })
    return (err as Error).message
  }
}

t.test('refused in any mode: references outside the schema or to nowhere, recursion with no finite instance', async t => {
  for (const strict of [true, false]) {
    t.match(refusal({ $ref: 'https://example.com/s.json' }, strict), /not a reference inside the schema/)
    t.match(refusal({ type: 'object', properties: { a: { $ref: 'other.json#/x' } } }, strict), /not a reference inside the schema/)
    t.match(refusal({ $ref: '#/$defs/missing', $defs: {} }, strict), /points to nothing/)
    t.match(refusal({ $ref: '#/$defs/a', $defs: { a: { $ref: '#/$defs/a' } } }, strict), /no finite instance/, 'a self-referencing $ref')
    t.match(refusal({ $ref: '#/$defs/a', $defs: { a: { $ref: '#/$defs/b' }, b: { $ref: '#/$defs/a' } } }, strict), /no finite instance/, 'a two-step cycle')
    t.match(refusal({ type: 'object', properties: { next: { $ref: '#' } }, required: ['next'] }, strict), /no finite instance/, 'a required property back to its object')
    t.match(refusal({ type: 'array', minItems: 1, items: { $ref: '#' } }, strict), /no finite instance/, 'a non-empty array of itself')
    t.match(refusal({ anyOf: [{ $ref: '#' }, { type: 'object', properties: { a: { $ref: '#' } }, required: ['a'] }] }, strict), /no finite instance/, 'every branch recurses')
  }
})

t.test('refused with strict, ignored without: not, contradictory allOf', async t => {
  t.match(refusal({ type: 'string', not: { const: 'x' } }), /"not"/)
  t.match(refusal({ type: 'object', properties: { a: { not: { type: 'null' } } } }), /"not"/, 'nested too')
  t.match(refusal({ allOf: [{ type: 'string' }, { type: 'integer' }] }), /allOf/)
  t.match(refusal({ type: 'object', allOf: [{ type: 'array' }] }), /allOf/, 'the node\'s own type against a branch')
  t.match(refusal({ allOf: [{ const: 1 }, { const: 2 }] }), /allOf/)
  t.match(refusal({ allOf: [{ $ref: '#/$defs/s' }, { type: 'boolean' }], $defs: { s: { type: 'string' } } }), /allOf/, 'through a $ref')
  t.equal(refusal({ type: 'string', not: { const: 'x' } }, false), undefined)
  t.equal(refusal({ allOf: [{ type: 'string' }, { type: 'integer' }] }, false), undefined)
})

t.test('let through: real schemas, recursion with a way out, the deep chains (the grammar workers bound those)', async t => {
  const tree = { type: 'object', properties: { name: { type: 'string' }, children: { type: 'array', items: { $ref: '#' } } }, required: ['name'] }
  const list = { $ref: '#/$defs/node', $defs: { node: { type: 'object', properties: { value: { type: 'integer' }, next: { anyOf: [{ $ref: '#/$defs/node' }, { type: 'null' }] } }, required: ['value', 'next'] } } }
  const pydantic = { type: 'object', properties: { pet: { allOf: [{ $ref: '#/definitions/Pet' }], description: 'the pet' } }, required: ['pet'], definitions: { Pet: { type: 'object', properties: { name: { type: 'string' } }, required: ['name'] } } }
  const escaped = { $ref: '#/$defs/a~1b', $defs: { 'a/b': { type: 'integer' } } }
  for (const [name, schema] of [['an optional recursive property', tree], ['a linked list ending in null', list], ['a single-branch allOf of a $ref', pydantic], ['a JSON pointer with an escaped "/"', escaped], ['the 200-level $ref chain', refChain(200)], ['the 70-level anyOf chain', anyOfChain(70)], ['number and integer together', { allOf: [{ type: 'number' }, { type: 'integer' }] }]] as const) {
    t.equal(refusal(schema), undefined, name)
  }
  checkResponseFormat({ type: 'json_object' })
  checkResponseFormat({ type: 'json_schema', json_schema: { name: 'x' } })
  t.pass('json_object and a schema-less json_schema are nothing to check')
})

t.test('bounded: the largest and the most tangled schemas are refused, quickly', async t => {
  const properties: Record<string, unknown> = {}
  for (let i = 0; i <= MAX_SCHEMA_NODES; i++) properties[`p${i}`] = { type: 'string' }
  t.match(refusal({ type: 'object', properties }), new RegExp(`more than ${MAX_SCHEMA_NODES} subschemas`))
  const defs: Record<string, unknown> = {}
  for (let i = 0; i <= MAX_SCHEMA_REFS; i++) defs[`d${i}`] = { $ref: `#/$defs/d${i + 1}` }
  defs[`d${MAX_SCHEMA_REFS + 1}`] = { type: 'string' }
  t.match(refusal({ $ref: '#/$defs/d0', $defs: defs }), new RegExp(`more than ${MAX_SCHEMA_REFS} distinct`))
  // Every definition refers to every other (and none has a way out): each round revisits them all.
  const tangled: Record<string, unknown> = {}
  for (let i = 0; i < 300; i++) tangled[`t${i}`] = { type: 'object', properties: Object.fromEntries(Array.from({ length: 60 }, (_, j) => [`p${j}`, { $ref: `#/$defs/t${(i + j + 1) % 300}` }])), required: ['p0'] }
  const message = refusal({ $ref: '#/$defs/t0', $defs: tangled })
  t.match(message, /no finite instance|too tangled/, message ?? 'accepted')
})
