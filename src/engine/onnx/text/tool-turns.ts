// Renders a conversation that holds tool turns (assistant tool calls, tool results) with the
// model's chat template, in its family's tool format (src/engine/tools/).
//
// R1's stock template has defects with tools: it never resets its first-call flag (a second
// calls turn loses its opening), closes the calls block only after a second call, never resets
// its first-output flag, and adds no generation prompt after tool outputs. So chatd never gives
// it tool messages: a calls turn, its results and the answer that follows become one assistant
// message whose text chatd writes in the format the template means:
//   <｜Assistant｜>TEXT<｜tool▁calls▁begin｜>CALLS<｜tool▁calls▁end｜><｜end▁of▁sentence｜>
//   <｜tool▁outputs▁begin｜>RESULTS<｜tool▁outputs▁end｜>ANSWER<｜end▁of▁sentence｜>
// and when the conversation ends with results, the prompt ends with the outputs block and the
// template's opening of thinking (`<think>\n`), where the model writes its next answer.
// Every other template gets the generic form (json-form.ts): calls as text in the assistant
// turn, results as a user turn of <tool_response> blocks.
// Message text is quoted (content-quoting.ts); only the format's own tokens stay control tokens.

import type { ChatMessage } from '../../backend.ts'
import type { ToolCallFormat } from '../../tools/format.ts'
import { jsonFormOutputs } from '../../tools/json-form.ts'
import { R1_ASSISTANT, r1Outputs } from '../../tools/r1.ts'
import type { ChatTemplate, ChatTemplateMessage, RenderedPrompt } from './chat-template.ts'

type Quote = (text: string) => string

export function hasToolTurns (messages: readonly ChatMessage[]): boolean {
  return messages.some(m => m.role === 'tool' || (m.toolCalls?.length ?? 0) > 0)
}

function callsOf (m: ChatMessage, quote: Quote) {
  return (m.toolCalls ?? []).map(c => ({ name: quote(c.function.name), arguments: quote(c.function.arguments) }))
}

/** The generic form: calls as assistant text, consecutive results as one user turn. */
function genericTurns (messages: readonly ChatMessage[], format: ToolCallFormat, quote: Quote): ChatTemplateMessage[] {
  const out: ChatTemplateMessage[] = []
  for (let i = 0; i < messages.length; i++) {
    const m = messages[i]
    if (m.role === 'tool') {
      const results: ChatMessage[] = []
      while (i < messages.length && messages[i].role === 'tool') results.push(messages[i++])
      i--
      out.push({ role: 'user', content: quote(jsonFormOutputs(results)) })
    } else if ((m.toolCalls?.length ?? 0) > 0) {
      const calls = format.calls((m.toolCalls ?? []).map(c => ({ name: c.function.name, arguments: c.function.arguments })))
      out.push({ role: 'assistant', content: quote(m.content === '' ? calls : `${m.content}\n${calls}`) })
    } else {
      out.push({ role: m.role, content: quote(m.content) })
    }
  }
  return out
}

/** R1: see the file's comment. */
function r1Turns (template: ChatTemplate, messages: readonly ChatMessage[], format: ToolCallFormat, quote: Quote): RenderedPrompt {
  const out: ChatTemplateMessage[] = []
  for (let i = 0; i < messages.length; i++) {
    const m = messages[i]
    if ((m.toolCalls?.length ?? 0) === 0 || m.role !== 'assistant') {
      // A tool message is always preceded by a calls turn (generate-request.ts checks), so none reaches here.
      out.push({ role: m.role, content: quote(m.content) })
      continue
    }
    let text = quote(m.content) + format.calls(callsOf(m, quote)) + template.eosToken
    const results: string[] = []
    while (i + 1 < messages.length && messages[i + 1].role === 'tool') results.push(quote(messages[++i].content))
    if (results.length > 0) text += r1Outputs(results)
    if (i === messages.length - 1) {
      // The conversation ends with the calls and their results: the model answers next.
      const before = template.render(out, { addGenerationPrompt: false })
      const opening = template.render([{ role: 'user', content: '' }]).endsInThink ? '<think>\n' : ''
      const prompt = before.text + R1_ASSISTANT + text + opening
      return { text: prompt, endsInThink: opening !== '' }
    }
    const next = messages[i + 1]
    if (next.role === 'assistant' && (next.toolCalls?.length ?? 0) === 0) {
      text += quote(next.content)
      i++
    }
    out.push({ role: 'assistant', content: text })
  }
  return template.render(out)
}

/** The prompt of a conversation with tool turns. */
export function renderToolTurns (template: ChatTemplate, format: ToolCallFormat, messages: readonly ChatMessage[], quote: Quote): RenderedPrompt {
  if (format.name === 'r1') return r1Turns(template, messages, format, quote)
  return template.render(genericTurns(messages, format, quote))
}
