// The `input` items of a Responses request, checked one by one: which kind each
// is (a message, a function call or its output, a reasoning item, a hosted
// search sent back), each against its own schema, so a refusal names the item
// and its field (`input[3].call_id`). Images, files and audio are refused by
// name: the models read text only. Items a client sends back are normalised
// with an id each for the store.

import { Compile } from 'typebox/compile'
import { Value } from 'typebox/value'
import { invalidParam } from '../../errors.ts'
import type { SearchResult } from '../../search/provider.ts'
import { REPLAYED_RESULTS_MAX } from '../pipeline/hosted-search.ts'
import { newId, type IdPrefix } from './ids.ts'
import { FunctionCallItem, FunctionCallOutputItem, MessageItem, ReasoningItem, WebSearchCallItem } from './schema.ts'

export type InputItem =
  | ({ kind: 'message' } & MessageItem)
  | ({ kind: 'function_call' } & FunctionCallItem)
  | ({ kind: 'function_call_output' } & FunctionCallOutputItem)
  | ({ kind: 'reasoning' } & ReasoningItem)
  | ({ kind: 'web_search_call' } & WebSearchCallItem)

const SCHEMAS = {
  message: MessageItem,
  function_call: FunctionCallItem,
  function_call_output: FunctionCallOutputItem,
  reasoning: ReasoningItem,
  web_search_call: WebSearchCallItem,
} as const

const CHECKS = {
  message: Compile(MessageItem),
  function_call: Compile(FunctionCallItem),
  function_call_output: Compile(FunctionCallOutputItem),
  reasoning: Compile(ReasoningItem),
  web_search_call: Compile(WebSearchCallItem),
} as const

const ID_PREFIX: Record<keyof typeof CHECKS, IdPrefix> = {
  message: 'msg',
  function_call: 'fc',
  function_call_output: 'fco',
  reasoning: 'rs',
  web_search_call: 'ws',
}

/** The longest source URL an earlier search's item keeps and replays. */
export const SOURCE_URL_MAX = 2048

const TEXT_PARTS = new Set(['input_text', 'output_text', 'text'])
const NOT_TEXT_PARTS = new Set(['input_image', 'input_file', 'input_audio'])

function fieldError (check: ReturnType<typeof Compile>, value: unknown, at: string): Error {
  const [first] = check.Errors(value)
  const path = (first?.instancePath ?? '').split('/').slice(1).map(s => /^\d+$/.test(s) ? `[${s}]` : `.${s}`).join('')
  if (first?.keyword === 'required') {
    const missing = (first.params as { requiredProperties?: string[] }).requiredProperties?.[0] ?? ''
    const param = `${at}${path}.${missing}`
    return invalidParam(param, `Missing required parameter: '${param}'.`)
  }
  const param = `${at}${path}`
  return invalidParam(param, `Invalid value for '${param}': ${first?.message ?? 'is invalid'}.`)
}

function kindOf (item: Record<string, unknown>, at: string): keyof typeof CHECKS {
  const type = item.type
  if (type === undefined && 'role' in item) return 'message'
  if (typeof type === 'string' && Object.hasOwn(CHECKS, type)) return type as keyof typeof CHECKS
  if (type === 'item_reference') {
    throw invalidParam(`${at}.type`, `${at}: item_reference is not supported; send the item itself, or continue a stored response with previous_response_id.`)
  }
  const shown = typeof type === 'string' ? `'${type.slice(0, 64)}'` : JSON.stringify(type ?? null)
  throw invalidParam(`${at}.type`, `${at}.type ${shown} is not an input item chatd takes: message, function_call, function_call_output, reasoning or web_search_call.`)
}

/** The text of a message's parts, joined; 400 naming a part that is not text. */
function partsText (parts: Array<{ type: string; text?: string; refusal?: string }>, at: string): string {
  return parts.map((part, j) => {
    const where = `${at}[${j}]`
    if (TEXT_PARTS.has(part.type)) {
      if (part.text === undefined) throw invalidParam(`${where}.text`, `Missing required parameter: '${where}.text'.`)
      return part.text
    }
    if (part.type === 'refusal') return part.refusal ?? ''
    if (NOT_TEXT_PARTS.has(part.type)) throw invalidParam(where, `${where} is an ${part.type} part; the models here read text only.`)
    throw invalidParam(`${where}.type`, `${where}.type '${part.type}' is not a content part chatd takes: input_text, output_text or refusal.`)
  }).join('')
}

export function messageText (item: MessageItem, at: string): string {
  return typeof item.content === 'string' ? item.content : partsText(item.content, `${at}.content`)
}

export function outputText (item: FunctionCallOutputItem, at: string): string {
  return typeof item.output === 'string' ? item.output : partsText(item.output, `${at}.output`)
}

/** Checks each item; throws 400 naming the first field at fault (`at(i)` is how item i is named). */
export function checkInputItems (items: unknown[], at: (i: number) => string): InputItem[] {
  return items.map((value, i) => {
    const where = at(i)
    if (typeof value !== 'object' || value === null || Array.isArray(value)) throw invalidParam(where, `${where} must be an item object.`)
    // null means absent, as clients send it (an item's id or status not set).
    const fields = Object.fromEntries(Object.entries(value).filter(([, v]) => v !== null))
    const kind = kindOf(fields, where)
    const check = CHECKS[kind]
    if (!check.Check(fields)) throw fieldError(check, fields, where)
    const item = { kind, ...fields } as InputItem
    // Text is checked here, so a bad part is refused before anything else is done.
    if (item.kind === 'message') messageText(item, where)
    if (item.kind === 'function_call_output') outputText(item, where)
    return item
  })
}

/**
 * The item as it is stored: the fields its schema names (a client's own fields are not kept: they
 * reach no prompt, and stored bytes should be what a request paid for), with an id when it came
 * without one. A reasoning item keeps only its id: its summary and sealed thinking add nothing to
 * later prompts (prompt shaping drops earlier thinking), so they are not stored either. A web
 * search keeps the links of its sources that a later turn replays (`searchSources`).
 */
export function normalisedItem (value: Record<string, unknown>): Record<string, unknown> {
  const fields = Object.fromEntries(Object.entries(value).filter(([, v]) => v !== null))
  const kind = fields.type === undefined && 'role' in fields ? 'message' : fields.type as keyof typeof CHECKS
  const known = Object.hasOwn(SCHEMAS, kind) ? Value.Clean(SCHEMAS[kind], Value.Clone(fields)) as Record<string, unknown> : fields
  const sources = kind === 'web_search_call' ? searchSources(fields.action) : undefined
  if (sources !== undefined && typeof known.action === 'object' && known.action !== null) {
    known.action = { ...known.action, sources: sources.map(s => ({ type: 'url', url: s.url })) }
  }
  const item: Record<string, unknown> = kind === 'message'
    ? { type: 'message', ...known }
    : kind === 'reasoning' ? { type: 'reasoning', ...(typeof known.id === 'string' ? { id: known.id } : {}), summary: [] } : known
  if (typeof item.id !== 'string') item.id = newId(ID_PREFIX[kind] ?? 'msg')
  return item
}

/** The sources a web_search_call item lists, as results without their text; undefined when it lists none. */
export function searchSources (action: unknown): SearchResult[] | undefined {
  const sources = (action as { sources?: unknown } | undefined)?.sources
  if (!Array.isArray(sources)) return undefined
  return sources
    .filter((s): s is { url: string } => typeof s === 'object' && s !== null && typeof (s as { url?: unknown }).url === 'string' && (s as { url: string }).url.length <= SOURCE_URL_MAX)
    .slice(0, REPLAYED_RESULTS_MAX)
    .map(s => ({ title: '', url: s.url, snippet: '' }))
}
