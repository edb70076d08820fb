// The generic tool-call form, for models whose template has no tool format of its own: each call
// is a JSON object between <tool_call> tags; results come back as a user turn of
// <tool_response> blocks.
//   <tool_call>
//   {"name": "NAME", "arguments": {...}}
//   </tool_call>

import { argumentsText } from './arguments.ts'
import type { ToolCallFormat, WrittenCall } from '../backend.ts'

const OPEN = '<tool_call>'
const CLOSE = '</tool_call>'

/** The user turn that carries tool results back to the model. */
export function jsonFormOutputs (outputs: Array<{ name?: string; content: string }>): string {
  return outputs.map(o => `<tool_response>\n${o.content}\n</tool_response>`).join('\n')
}

const CALL = /^\s*<tool_call>([\s\S]*?)<\/tool_call>/

export const jsonForm: ToolCallFormat = {
  name: 'json',
  callStart: OPEN,
  forced: { open: `${OPEN}\n{"name": "`, afterName: '", "arguments": ', close: `}\n${CLOSE}` },
  calls: calls => calls.map(c => `${OPEN}\n{"name": ${JSON.stringify(c.name)}, "arguments": ${c.arguments}}\n${CLOSE}`).join('\n'),
  parse (text) {
    let rest = text
    const calls: WrittenCall[] = []
    for (let m = CALL.exec(rest); m !== null; m = CALL.exec(rest)) {
      let value: unknown
      try {
        value = JSON.parse(m[1])
      } catch {
        return undefined
      }
      if (typeof value !== 'object' || value === null) return undefined
      const { name, arguments: args } = value as { name?: unknown; arguments?: unknown }
      const argsText = typeof args === 'string' ? argumentsText(args) : argumentsText(JSON.stringify(args ?? null))
      if (typeof name !== 'string' || argsText === undefined) return undefined
      calls.push({ name, arguments: argsText })
      rest = rest.slice(m[0].length)
    }
    return calls.length > 0 && rest.trim() === '' ? calls : undefined
  },
}
