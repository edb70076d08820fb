// What a JSON response_format's schema must be before anything is compiled:
// a cheap, bounded walk over the schema object, run before the request is
// admitted. It refuses, with a 400 naming response_format, what the grammar
// engine would fail on after admission (a $ref to nowhere, a $ref outside the
// schema, recursion with no finite instance) and, in strict mode, what it
// would silently not enforce (`not`, an `allOf` whose branches contradict
// each other), since strict promises a reply valid against the schema.
import { ApiError } from '../errors.ts'
import type { ResponseFormat } from './backend.ts'

/** Subschemas walked at most: far above real schemas, far below what costs time. */
export const MAX_SCHEMA_NODES = 20_000
/** Distinct $ref targets at most. */
export const MAX_SCHEMA_REFS = 1_000
/** Subschema visits the finiteness check may make (it revisits what references resolve to). */
const MAX_CHECK_VISITS = 2_000_000

type Json = null | boolean | number | string | Json[] | { [key: string]: Json }
type Schema = boolean | { [key: string]: Json }

/** Keywords whose value is one subschema, a list of them, or a map of them. */
const ONE = ['items', 'additionalProperties', 'contains', 'propertyNames', 'if', 'then', 'else', 'not', 'unevaluatedItems', 'unevaluatedProperties', 'additionalItems']
const LIST = ['anyOf', 'oneOf', 'allOf', 'prefixItems']
const MAP = ['properties', 'patternProperties', '$defs', 'definitions', 'dependentSchemas']

function refuse (reason: string): ApiError {
  return new ApiError('invalid_parameter', reason, { param: 'response_format' })
}

const isObject = (value: unknown): value is Record<string, Json> => typeof value === 'object' && value !== null && !Array.isArray(value)

/** Resolves a local JSON pointer ("#", "#/$defs/a") in `root`; undefined when it points nowhere. */
function resolve (root: Schema, ref: string): Schema | undefined {
  if (ref === '#') return root
  if (!ref.startsWith('#/')) return undefined
  let node: Json | undefined = root as Json
  for (const raw of ref.slice(2).split('/')) {
    let part: string
    try {
      part = decodeURIComponent(raw).replaceAll('~1', '/').replaceAll('~0', '~')
    } catch {
      return undefined
    }
    if (Array.isArray(node)) node = node[Number(part)]
    else if (isObject(node) && Object.hasOwn(node, part)) node = node[part]
    else return undefined
  }
  return typeof node === 'boolean' || isObject(node) ? node : undefined
}

function subschemas (node: Record<string, Json>): Schema[] {
  const out: Schema[] = []
  const take = (value: Json | undefined): void => { if (typeof value === 'boolean' || isObject(value)) out.push(value) }
  for (const key of ONE) take(node[key])
  for (const key of LIST) if (Array.isArray(node[key])) for (const item of node[key]) take(item)
  for (const key of MAP) if (isObject(node[key])) for (const item of Object.values(node[key])) take(item)
  if (Array.isArray(node.items)) for (const item of node.items) take(item)
  return out
}

const TYPES = ['string', 'number', 'integer', 'boolean', 'null', 'object', 'array']

/** The JSON types a schema allows by its `type` and `const`/`enum` alone (all of them when it says nothing). */
function typesOf (node: Schema): Set<string> {
  if (node === false) return new Set()
  if (node === true) return new Set(TYPES)
  let types = new Set(TYPES)
  if (typeof node.type === 'string') types = new Set([node.type])
  else if (Array.isArray(node.type)) types = new Set(node.type.filter((t): t is string => typeof t === 'string'))
  // An integer is a number: "number" allows it, "integer" narrows "number".
  if (types.has('number')) types.add('integer')
  if ('const' in node) types = intersect(types, new Set([jsonType(node.const)]))
  if (Array.isArray(node.enum)) types = intersect(types, new Set(node.enum.map(jsonType)))
  return types
}

function jsonType (value: Json): string {
  if (value === null) return 'null'
  if (Array.isArray(value)) return 'array'
  if (typeof value === 'number') return Number.isInteger(value) ? 'integer' : 'number'
  return typeof value
}

function intersect (a: Set<string>, b: Set<string>): Set<string> {
  const out = new Set<string>()
  for (const t of a) if (b.has(t) || (t === 'integer' && b.has('number'))) out.add(t)
  return out
}

/**
 * Refuses (throws ApiError invalid_parameter, param response_format) a JSON format's schema that
 * the grammar could not compile into anything, or, with `strict`, could not enforce.
 */
export function checkResponseFormat (format: ResponseFormat): void {
  if (format.type !== 'json_schema' || format.json_schema.schema === undefined) return
  const root = format.json_schema.schema as Schema
  const strict = format.json_schema.strict === true

  // 1. Walk every subschema once (bounded), checking each $ref and each keyword on the way.
  const targets = new Map<string, Schema>()
  const stack: Schema[] = [root]
  let nodes = 0
  while (stack.length > 0) {
    const node = stack.pop() as Schema
    if (++nodes > MAX_SCHEMA_NODES) throw refuse(`the JSON schema has more than ${MAX_SCHEMA_NODES} subschemas.`)
    if (typeof node === 'boolean') continue
    if ('$ref' in node) {
      const ref = node.$ref
      if (typeof ref !== 'string' || !ref.startsWith('#')) throw refuse(`$ref ${JSON.stringify(ref)} is not a reference inside the schema (only "#..." references are followed; nothing is fetched).`)
      if (!targets.has(ref)) {
        const target = resolve(root, ref)
        if (target === undefined) throw refuse(`$ref ${JSON.stringify(ref)} points to nothing in the schema.`)
        if (targets.size >= MAX_SCHEMA_REFS) throw refuse(`the JSON schema has more than ${MAX_SCHEMA_REFS} distinct $ref targets.`)
        targets.set(ref, target)
      }
    }
    if (strict && 'not' in node) throw refuse('"not" cannot be enforced by structured output; remove it, or send strict: false to have it ignored.')
    if (strict && Array.isArray(node.allOf)) {
      const branches = [node, ...node.allOf.filter((b): b is Schema => typeof b === 'boolean' || isObject(b))]
        .map(b => isObject(b) && typeof b.$ref === 'string' ? resolve(root, b.$ref) ?? b : b)
      let types = new Set(TYPES)
      for (const branch of branches) types = intersect(types, typesOf(branch))
      const consts = branches.filter(b => isObject(b) && 'const' in b).map(b => JSON.stringify((b as Record<string, Json>).const))
      if (types.size === 0 || new Set(consts).size > 1) throw refuse('"allOf" has branches no value can satisfy together (their types or consts contradict).')
    }
    stack.push(...subschemas(node))
  }

  // 2. Which $ref targets have a finite instance: a least fixpoint, each round one pass over the
  //    targets without following references (a reference counts once its target is known finite).
  const finite = new Set<string>()
  const budget = { visits: MAX_CHECK_VISITS }
  let changed = true
  const forward = [...targets]
  const backward = [...forward].reverse()
  for (let round = 0; changed && round <= targets.size; round++) {
    changed = false
    // Alternating directions: a chain of references settles in two rounds whichever way it was found.
    for (const [ref, target] of round % 2 === 0 ? backward : forward) {
      if (!finite.has(ref) && hasInstance(target, finite, budget)) {
        finite.add(ref)
        changed = true
      }
    }
  }
  if (!hasInstance(root, finite, budget)) throw refuse('the JSON schema has no finite instance (a $ref recursion with no way out: make the recursive property optional, or add a branch without it).')
}

/** Whether `node` has a finite instance, given which $ref targets are known to; does not follow references itself. */
function hasInstance (node: Schema, finite: Set<string>, budget: { visits: number }, depth = 0): boolean {
  if (--budget.visits < 0) throw refuse('the JSON schema\'s references are too tangled to check (simplify its $ref structure).')
  if (typeof node === 'boolean') return node
  if (depth > 256) return true // the body's own nesting bound keeps real schemas far below this
  if (typeof node.$ref === 'string' && !finite.has(node.$ref)) return false
  const sub = (value: Json | undefined): boolean => typeof value === 'boolean' || isObject(value) ? hasInstance(value, finite, budget, depth + 1) : true
  for (const key of ['anyOf', 'oneOf']) {
    const list = node[key]
    if (Array.isArray(list) && list.length > 0 && !list.some(sub)) return false
  }
  if (Array.isArray(node.allOf) && !node.allOf.every(sub)) return false
  const types = typesOf(node)
  // A value of some type other than object and array is finite by itself.
  if ([...types].some(t => t !== 'object' && t !== 'array')) return true
  if (types.has('object')) {
    const properties = isObject(node.properties) ? node.properties : {}
    const required = Array.isArray(node.required) ? node.required.filter((r): r is string => typeof r === 'string') : []
    if (required.every(name => !(name in properties) || sub(properties[name]))) return true
  }
  if (types.has('array')) {
    const min = typeof node.minItems === 'number' ? node.minItems : 0
    const prefix = Array.isArray(node.prefixItems) ? node.prefixItems : []
    const needed = prefix.slice(0, min)
    if (needed.every(sub) && (min <= prefix.length || sub(node.items))) return true
  }
  return false
}
