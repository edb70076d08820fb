// How a model family writes tool calls, for backends that render tools into the prompt
// themselves (the local engine). Each family (r1.ts, json-form.ts) gives the text that opens a
// call, the text of calls and results inside a conversation, and the parser of what the model
// wrote. The tools block (instructions) is the same for every family but for its example.

import type { ToolCallFormat, ToolDefinition } from '../backend.ts'
import { jsonForm } from './json-form.ts'
import { r1Form } from './r1.ts'

export type { ToolCallFormat, WrittenCall } from '../backend.ts'

export const TOOL_FORMATS = { r1: r1Form, json: jsonForm } as const

/** The family of a chat template: R1's when it writes DeepSeek's tool tokens, else the generic JSON form. */
export function toolFormatForTemplate (templateSource: string): ToolCallFormat {
  return templateSource.includes(r1Form.callStart) ? r1Form : jsonForm
}

/**
 * The tools block: a system text listing the tools (name, description, parameters as JSON) and
 * the exact form of a call, with an example in the family's form.
 */
export function toolInstructions (format: ToolCallFormat, tools: ToolDefinition[], parallel: boolean): string {
  const listed = listTools(tools)
  const example = format.calls([{ name: 'TOOL_NAME', arguments: '{"ARGUMENT": "VALUE"}' }])
  return [
    '# Tools',
    '',
    'You may call these tools (functions). Each line is one tool: its name, what it does, and the JSON Schema of its arguments.',
    '<tools>',
    ...listed,
    '</tools>',
    '',
    'To call a tool, end your answer with the call, written exactly in this form, with the arguments as one JSON object valid against the tool\'s parameters:',
    example,
    parallel
      ? 'To call several tools at once, write each call in turn in the same form.'
      : 'Call at most one tool per answer.',
    'The results come back in the next message. When no tool is needed, answer as usual.',
  ].join('\n')
}

function listTools (tools: ToolDefinition[]): string[] {
  return tools.map(t => JSON.stringify({
    name: t.function.name,
    ...(t.function.description !== undefined ? { description: t.function.description } : {}),
    parameters: t.function.parameters ?? { type: 'object', properties: {} },
  }))
}

/**
 * The tools block of a forced call (tool_choice `required` or a named tool): the engine writes the
 * call's form itself, so the block lists only the tools the call may name and says a call comes.
 */
export function forcedCallInstructions (tools: ToolDefinition[]): string {
  return [
    `# Tools\nYour answer calls ${tools.length === 1 ? 'this tool' : 'one of these tools'} (name, what it does, JSON Schema of the arguments):`,
    '<tools>',
    ...listTools(tools),
    '</tools>',
  ].join('\n')
}
