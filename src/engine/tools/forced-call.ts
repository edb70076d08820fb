// tool_choice `required` or a named tool on a backend that prompts for tools: the call is written
// by construction (the local engine's tool-call constraint). This module says which tools the
// call may name and the JSON format each one's arguments are constrained to: compiled, like a
// JSON response_format, after the request is admitted, for the request's scope.

import type { ResponseFormat, ToolChoice, ToolDefinition } from '../backend.ts'

type JsonFormat = Exclude<ResponseFormat, { type: 'text' }>

/** The tools a forced call may name (all of them for `required`, the named one); undefined: no forced call. */
export function forcedCallTools (tools: ToolDefinition[] | undefined, choice: ToolChoice | undefined): ToolDefinition[] | undefined {
  if (!tools || tools.length === 0 || choice === undefined || choice === 'auto' || choice === 'none') return undefined
  if (choice === 'required') return tools
  const named = tools.filter(t => t.function.name === choice.function.name)
  return named.length > 0 ? named : undefined
}

/**
 * The JSON format of a tool's arguments: its `parameters` (absent: an object with no declared
 * properties), strict unless the tool says `strict: false`: only declared properties are written,
 * so every call still validates against the schema, and a small model cannot ramble through
 * undeclared properties until max_tokens cuts the call short.
 */
export function argumentsFormat (tool: ToolDefinition): JsonFormat {
  return {
    type: 'json_schema',
    json_schema: {
      name: tool.function.name,
      schema: tool.function.parameters ?? { type: 'object', properties: {} },
      strict: tool.function.strict !== false,
    },
  }
}
