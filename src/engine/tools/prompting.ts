// Tools for a backend that prompts for them itself (the local engine), in one
// place: which block of instructions the prompt gets (every tool and the
// call's form; only the tools a forced call may name; none with tool_choice
// none), and how the answer's events become tool calls (parsed from what the
// model wrote, or streamed as a forced call writes them by construction). The
// prompt layer asks for the block; the backend wraps its events; the engine
// itself renders tool turns (onnx/text/tool-turns.ts) and constrains a forced
// call (onnx/grammar/tool-call-constraint.ts) from the same request fields.
import type { GenerateEvent, GenerateRequest, ToolChoice, ToolDefinition } from '../backend.ts'
import { parseToolCalls } from './call-parser.ts'
import { forcedCallTools } from './forced-call.ts'
import { streamForcedCall } from './forced-stream.ts'
import { forcedCallInstructions, toolInstructions, type ToolCallFormat } from './format.ts'

/** The system text that offers the tools ('' when none are offered). */
export function toolsBlock (format: ToolCallFormat, tools: ToolDefinition[] | undefined, toolChoice: ToolChoice | undefined, parallel: boolean): string {
  if (!tools || tools.length === 0 || toolChoice === 'none') return ''
  const forced = forcedCallTools(tools, toolChoice)
  return forced ? forcedCallInstructions(forced) : toolInstructions(format, tools, parallel)
}

/** The answer's events with the calls the model wrote as tool calls (the events as they are when no tool is offered). */
export function readToolCalls (events: AsyncIterable<GenerateEvent>, format: ToolCallFormat, request: GenerateRequest): AsyncIterable<GenerateEvent> {
  if (!request.tools || request.tools.length === 0 || request.toolChoice === 'none') return events
  // A forced call is written in the form by construction: its arguments stream as they come.
  const forced = forcedCallTools(request.tools, request.toolChoice)
  if (forced) return streamForcedCall(events, { format, tools: forced })
  return parseToolCalls(events, { format, tools: request.tools, parallel: request.parallelToolCalls !== false })
}
