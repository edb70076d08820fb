// The one vocabulary errors name a request's fields in, whichever door the
// request came by: `messages[3].content`, `messages[3].tool_calls[0].name`,
// `tools[2].parameters`, `max_tokens`, `response_format`, `tool_choice`, ...
// (the fields of the completion request, snake_case). The pipeline, its
// modules, the backends and the limiter name fields only so. Each door hands
// the pipeline a FieldTable once: which of its own fields each of these came
// from (its message and tool origins included), and the pipeline renames every
// error it throws into the door's terms in one place (`inDoorTerms`), so a
// client reads the field it sent.

import { ApiError, type ErrorCode } from '../../errors.ts'

/** The fields of one message: its role, its text, its tool calls (or one call's id, name or arguments), the call a tool message answers. */
export type MessagePart = 'role' | 'content' | 'tool_calls' | 'tool_call_id'
export type CallPart = 'id' | 'name' | 'arguments'
export type ToolPart = 'name' | 'description' | 'parameters'

/** A neutral field, taken apart: a message's (or one of its calls'), a tool's, or any other (`rest` follows its name: `.json_schema.name`). */
export type ParsedField =
  | { kind: 'message'; index: number; part?: MessagePart; call?: number; callPart?: CallPart }
  | { kind: 'tool'; index: number; part?: ToolPart }
  | { kind: 'other'; name: string; rest: string }

/** The neutral names, spelled once. */
export const fields = {
  message: (index: number, part?: MessagePart): string => `messages[${index}]${part ? `.${part}` : ''}`,
  call: (index: number, call: number, part?: CallPart): string => `messages[${index}].tool_calls[${call}]${part ? `.${part}` : ''}`,
  tool: (index: number, part?: ToolPart): string => `tools[${index}]${part ? `.${part}` : ''}`,
}

/** Takes a neutral field apart (the only place that reads one). */
export function parseField (field: string): ParsedField {
  const message = /^messages\[(\d+)\](?:\.(role|content|tool_call_id)|\.tool_calls(?:\[(\d+)\](?:\.(id|name|arguments))?)?)?$/.exec(field)
  if (message) {
    const [, index, simple, call, callPart] = message
    const part = (simple ?? (field.includes('.tool_calls') ? 'tool_calls' : undefined)) as MessagePart | undefined
    return {
      kind: 'message',
      index: Number(index),
      ...(part ? { part } : {}),
      ...(call !== undefined ? { call: Number(call) } : {}),
      ...(callPart ? { callPart: callPart as CallPart } : {}),
    }
  }
  const tool = /^tools\[(\d+)\](?:\.(name|description|parameters))?$/.exec(field)
  if (tool) return { kind: 'tool', index: Number(tool[1]), ...(tool[2] ? { part: tool[2] as ToolPart } : {}) }
  const name = /^[^.[]*/.exec(field)![0]
  return { kind: 'other', name, rest: field.slice(name.length) }
}

/**
 * A door's names for the neutral fields, given once per request. `renamed`: fields the door calls
 * otherwise, by prefix (the longest that matches wins: `response_format.json_schema` before
 * `response_format`); `message` and `tool`: the door's field that made message or tool `index`
 * (its origin), with the part asked for. Absent: the neutral name.
 */
export interface FieldTable {
  renamed?: Record<string, string>
  message?: (at: Extract<ParsedField, { kind: 'message' }>) => string
  tool?: (at: Extract<ParsedField, { kind: 'tool' }>) => string
}

/** Neutral field -> the door's name for it. */
export type FieldNames = (field: string) => string

export function fieldNames (table: FieldTable): FieldNames {
  const prefixes = Object.keys(table.renamed ?? {}).sort((a, b) => b.length - a.length)
  return field => {
    const at = parseField(field)
    if (at.kind === 'message' && table.message) return table.message(at)
    if (at.kind === 'tool' && table.tool) return table.tool(at)
    const prefix = prefixes.find(p => field === p || field.startsWith(`${p}.`) || field.startsWith(`${p}[`))
    return prefix === undefined ? field : table.renamed![prefix] + field.slice(prefix.length)
  }
}

/** The neutral names as they are: what a request that gives none is answered in. */
export const neutralNames: FieldNames = field => field

/**
 * An error about a field that the pipeline raises: it keeps the neutral field and writes its
 * message with whatever names the door gives (`name(field)` for each field it mentions), so the
 * message names the door's field as the param does.
 */
export class FieldError extends ApiError {
  readonly field: string
  readonly #write: (name: FieldNames) => string

  constructor (field: string, write: (name: FieldNames) => string, opts: { code?: ErrorCode; headers?: Record<string, string> } = {}) {
    super(opts.code ?? 'invalid_parameter', write(neutralNames), { param: field, ...(opts.headers ? { headers: opts.headers } : {}) })
    this.field = field
    this.#write = write
  }

  /** The same error, named in a door's terms. */
  named (names: FieldNames): ApiError {
    return new ApiError(this.code, this.#write(names), { param: names(this.field), headers: this.headers })
  }
}

/** A 400 invalid_parameter about `field`. */
export function fieldError (field: string, write: (name: FieldNames) => string): FieldError {
  return new FieldError(field, write)
}

/**
 * `err` in the door's terms: a FieldError rewritten with the door's names, any other ApiError (a
 * backend's, the limiter's: their messages spell no field) with its param renamed.
 */
export function inDoorTerms (err: unknown, names: FieldNames): unknown {
  if (err instanceof FieldError) return err.named(names)
  if (!(err instanceof ApiError) || err.param === null) return err
  const param = names(err.param)
  if (param === err.param) return err
  return new ApiError(err.code, err.message, { param, headers: err.headers, ...(err.operatorMessage !== undefined ? { operatorMessage: err.operatorMessage } : {}) })
}
