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
