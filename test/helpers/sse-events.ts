// The events of a server-sent events body, in order, read as clients read them (eventsource-parser):
// [event name, data parsed as JSON; a chat completion stream's last `[DONE]` as that string].
// Only CR and LF end a line in SSE, so a reply's U+2028 stays inside its data (a regular
// expression's `.` stops there).
import { createParser } from 'eventsource-parser'

export function sseEvents (text: string): Array<[string, any]> {
  const found: Array<[string, any]> = []
  const parser = createParser({ onEvent: e => { found.push([e.event ?? '', e.data === '[DONE]' ? '[DONE]' : JSON.parse(e.data)]) } })
  parser.feed(text)
  return found
}

/** Only the events' data, for streams whose events carry no names (chat completions, Responses). */
export function streamData (text: string): any[] {
  return sseEvents(text).map(([, data]) => data)
}

/**
 * The message a Messages API stream's events add up to, as Anthropic's SDK accumulates them: text,
 * thinking and signatures appended, a tool_use or server_tool_use block's input parsed from its
 * JSON deltas. Throws when an event's name is not its data's type (the SDK reads the type).
 */
export function accumulateMessage (events: Array<[string, any]>): any {
  let message: any
  for (const [name, data] of events) {
    if (name !== data.type) throw new Error(`an event named ${name} carries a ${data.type}`)
    if (name === 'message_start') message = structuredClone(data.message)
    else if (name === 'content_block_start') message.content[data.index] = structuredClone(data.content_block)
    else if (name === 'content_block_delta') {
      const block = message.content[data.index]
      const d = data.delta
      if (d.type === 'text_delta') block.text += d.text
      else if (d.type === 'thinking_delta') block.thinking += d.thinking
      else if (d.type === 'signature_delta') block.signature = d.signature
      else if (d.type === 'input_json_delta') block.partial = (block.partial ?? '') + d.partial_json
    } else if (name === 'content_block_stop') {
      const block = message.content[data.index]
      if (block.partial !== undefined) {
        block.input = JSON.parse(block.partial)
        delete block.partial
      }
    } else if (name === 'message_delta') {
      message.stop_reason = data.delta.stop_reason
      message.stop_sequence = data.delta.stop_sequence
      message.usage = { ...message.usage, ...data.usage }
    }
  }
  return message
}
