// The chat-completions body in the pipeline's terms. The pipeline names fields
// neutrally (../pipeline/fields.ts); the chat body spells most of them the same
// way, save a tool's (and a tool call's) `function` level, googleSearchStatus,
// and max_completion_tokens when the client capped the reply with it.

import { fields, type FieldTable } from '../pipeline/fields.ts'
import type { ChatCompletionRequest } from './schema.ts'

/** The chat body's names for the neutral fields. */
export function chatFields (body: Pick<ChatCompletionRequest, 'max_completion_tokens'>): FieldTable {
  return {
    renamed: {
      search: 'googleSearchStatus',
      ...(body.max_completion_tokens != null ? { max_tokens: 'max_completion_tokens' } : {}),
    },
    message: at => at.call === undefined
      ? fields.message(at.index, at.part)
      : `messages[${at.index}].tool_calls[${at.call}]${at.callPart === undefined ? '' : at.callPart === 'id' ? '.id' : `.function.${at.callPart}`}`,
    tool: at => `tools[${at.index}]${at.part ? `.function.${at.part}` : ''}`,
  }
}
