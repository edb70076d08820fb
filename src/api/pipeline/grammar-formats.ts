// The JSON formats a request has compiled before it runs on a backend that compiles grammars:
// its JSON response_format's, or, for a forced tool call (tool_choice `required` or a named tool
// on a backend that prompts for tools), the arguments of each tool the call may name. Each passes
// the same static schema check before the request is admitted, and is compiled after it, paid for
// and for the account's scope, on the same path; a fault names the field it came from (the engine's
// errors about a format name no field: `atField` puts the field in front).
import type { ResponseFormat } from '../../engine/backend.ts'
import { jsonFormatOf } from '../../engine/backend.ts'
import { checkResponseFormat } from '../../engine/schema-check.ts'
import { argumentsFormat, forcedCallTools } from '../../engine/tools/forced-call.ts'
import { ApiError } from '../../errors.ts'
import { FieldError, fields } from './fields.ts'
import type { CompletionRequest } from './request.ts'

type JsonFormat = Exclude<ResponseFormat, { type: 'text' }>

export interface GrammarFormat {
  format: JsonFormat
  /** The request field the format comes from (errors about it name this field): response_format or tools[i].parameters. */
  field: string
}

/** The formats to check and compile, in order; empty when the request constrains nothing. */
export function grammarFormats (req: CompletionRequest, promptsTools: boolean): GrammarFormat[] {
  const json = jsonFormatOf(req.responseFormat)
  if (json) return [{ format: json, field: 'response_format' }]
  if (!promptsTools) return []
  const tools = req.tools ?? []
  const forced = forcedCallTools(tools, req.toolChoice) ?? []
  return forced.map(tool => ({ format: argumentsFormat(tool), field: fields.tool(tools.indexOf(tool), 'parameters') }))
}

/** An error the engine raised about a format (it names response_format), as one about the field the format came from. */
export function atField (err: unknown, field: string): unknown {
  if (!(err instanceof ApiError) || err.param !== 'response_format') return err
  return new FieldError(field, name => `${name(field)}: ${err.message}`, { code: err.code, headers: err.headers })
}

/** The static schema check of each format, before admission (cheap and bounded). */
export function checkGrammarFormats (formats: GrammarFormat[]): void {
  for (const { format, field } of formats) {
    try {
      checkResponseFormat(format)
    } catch (err) {
      throw atField(err, field)
    }
  }
}
