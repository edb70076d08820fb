// DeepSeek R1's tool-call format (the tokens its chat template writes). A call:
//   <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME\n```json\nARGS\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>
// several calls joined by '\n' inside one calls block; results:
//   <｜tool▁outputs▁begin｜><｜tool▁output▁begin｜>RESULT<｜tool▁output▁end｜><｜tool▁outputs▁end｜>
// several results joined by '\n' inside one outputs block.

import { argumentsText } from './arguments.ts'
import type { ToolCallFormat, WrittenCall } from '../backend.ts'

export const R1_TOOL_TOKENS = {
  callsBegin: '<｜tool▁calls▁begin｜>',
  callsEnd: '<｜tool▁calls▁end｜>',
  callBegin: '<｜tool▁call▁begin｜>',
  callEnd: '<｜tool▁call▁end｜>',
  sep: '<｜tool▁sep｜>',
  outputsBegin: '<｜tool▁outputs▁begin｜>',
  outputsEnd: '<｜tool▁outputs▁end｜>',
  outputBegin: '<｜tool▁output▁begin｜>',
  outputEnd: '<｜tool▁output▁end｜>',
} as const

/** The opening of an assistant turn in R1's template. */
export const R1_ASSISTANT = '<｜Assistant｜>'

const T = R1_TOOL_TOKENS
const FENCE = '```'

function call (c: WrittenCall): string {
  return `${T.callBegin}function${T.sep}${c.name}\n${FENCE}json\n${c.arguments}\n${FENCE}${T.callEnd}`
}

/** The results block that follows a calls turn. */
export function r1Outputs (outputs: string[]): string {
  return T.outputsBegin + outputs.map(o => T.outputBegin + o + T.outputEnd).join('\n') + T.outputsEnd
}

const CALL = /^\s*<｜tool▁call▁begin｜>\s*function\s*<｜tool▁sep｜>\s*([^\n`<]+?)\s*\n```(?:json)?\s*\n([\s\S]*?)\n?```\s*<｜tool▁call▁end｜>/

export const r1Form: ToolCallFormat = {
  name: 'r1',
  callStart: T.callsBegin,
  forced: { open: `${T.callsBegin}${T.callBegin}function${T.sep}`, afterName: `\n${FENCE}json\n`, close: `\n${FENCE}${T.callEnd}${T.callsEnd}` },
  calls: calls => T.callsBegin + calls.map(call).join('\n') + T.callsEnd,
  parse (text) {
    if (!text.startsWith(T.callsBegin)) return undefined
    let rest = text.slice(T.callsBegin.length)
    const calls: WrittenCall[] = []
    for (let m = CALL.exec(rest); m !== null; m = CALL.exec(rest)) {
      const args = argumentsText(m[2])
      if (args === undefined) return undefined
      calls.push({ name: m[1], arguments: args })
      rest = rest.slice(m[0].length)
    }
    rest = rest.trim()
    if (rest.startsWith(T.callsEnd)) rest = rest.slice(T.callsEnd.length).trim()
    return calls.length > 0 && rest === '' ? calls : undefined
  },
}
