// The JSON formats a request has compiled before it runs on a backend that compiles grammars:
// its JSON response_format's, or, for a forced tool call (tool_choice `required` or a named tool
// on a backend that prompts for tools), the arguments of each tool the call may name. Each passes
// the same static schema check before the request is admitted, and is compiled after it, paid for
// and for the account's scope, on the same path; a fault names the field it came from.
import type { ResponseFormat, ToolChoice, ToolDefinition } from '../../engine/backend.ts'
import { jsonFormatOf } from '../../engine/backend.ts'
import { checkResponseFormat } from '../../engine/schema-check.ts'
import { argumentsFormat, forcedCallTools } from '../../engine/tools/forced-call.ts'
import { ApiError } from '../../errors.ts'
import { responseFormatOf } from './generate-request.ts'
import type { ChatCompletionRequest } from '../chat/schema.ts'

type JsonFormat = Exclude<ResponseFormat, { type: 'text' }>

export interface GrammarFormat {
  format: JsonFormat
  /** The request field the format comes from (errors about it name this field). */
  param: string
}

/** The formats to check and compile, in order; empty when the request constrains nothing. */
export function grammarFormats (body: ChatCompletionRequest, promptsTools: boolean): GrammarFormat[] {
  const json = jsonFormatOf(responseFormatOf(body))
  if (json) return [{ format: json, param: 'response_format' }]
  if (!promptsTools) return []
  const tools = (body.tools ?? []) as ToolDefinition[]
  const forced = forcedCallTools(tools, (body.tool_choice ?? undefined) as ToolChoice | undefined) ?? []
  return forced.map(tool => ({ format: argumentsFormat(tool), param: `tools[${tools.indexOf(tool)}].function.parameters` }))
}

/** An error about a format, as the field it came from: a tool's parameters are not response_format. */
export function asFieldError (err: unknown, param: string): unknown {
  if (!(err instanceof ApiError) || err.param !== 'response_format' || param === 'response_format') return err
  const message = err.message.replace(/^response_format: /, '').replace('for structured output', 'for a tool call')
  return new ApiError(err.code, `${param}: ${message}`, { param, headers: err.headers })
}

/** The static schema check of each format, before admission (cheap and bounded). */
export function checkGrammarFormats (formats: GrammarFormat[]): void {
  for (const { format, param } of formats) {
    try {
      checkResponseFormat(format)
    } catch (err) {
      throw asFieldError(err, param)
    }
  }
}
