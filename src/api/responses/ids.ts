// Ids of a response and of its items, in OpenAI's shapes: a prefix that says
// what the id names, then random characters.

import { randomBytes } from 'node:crypto'

export type IdPrefix = 'resp' | 'msg' | 'fc' | 'fco' | 'rs' | 'ws' | 'call'

export function newId (prefix: IdPrefix): string {
  return `${prefix}_${randomBytes(18).toString('hex')}`
}
