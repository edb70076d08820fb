// The events of a server-sent events body, in order, read as clients read them (eventsource-parser):
// [event name, data parsed as JSON]. Only CR and LF end a line in SSE, so a reply's U+2028 stays
// inside its data (a regular expression's `.` stops there).
import { createParser } from 'eventsource-parser'

export function sseEvents (text: string): Array<[string, any]> {
  const found: Array<[string, any]> = []
  const parser = createParser({ onEvent: e => { found.push([e.event ?? '', JSON.parse(e.data)]) } })
  parser.feed(text)
  return found
}
