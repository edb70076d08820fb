// Whether a new email address could pass for another account's: Unicode
// Technical Standard #39, applied to addresses.
//
// - Mixed scripts: each part of the address (the local part, each label of the
//   domain) must be written in one script. Its characters' Script_Extensions
//   are intersected (Common and Inherited characters, digits and punctuation,
//   go with any script; Han goes with Hiragana, Katakana, Hangul and Bopomofo
//   as UTS #39's augmented sets say); an empty intersection is a mix, such as a
//   Cyrillic "а" among Latin letters.
// - Confusable skeletons: two addresses that look alike have the same
//   skeleton (UTS #39: NFD, each character replaced by its prototype from
//   confusables.txt, NFD again). chatd goes one step further and drops the
//   combining diacritics U+0300 to U+036F, so "ádmin" and "admin" are one
//   skeleton too. The database keeps each account's skeleton hashed
//   (accounts.email_skeleton, unique) so the check is one indexed lookup.
//
// Every step is linear in the address (at most 254 characters): a bounded cost.

import { createHash } from 'node:crypto'
import { CONFUSABLES, SCRIPTS } from './confusables-data.ts'

let prototypes: Map<string, string> | undefined

/** Each confusable character's prototype, read from the generated table once. */
function prototypeTable (): Map<string, string> {
  if (prototypes) return prototypes
  prototypes = new Map()
  for (const line of CONFUSABLES.split('\n')) {
    if (line === '') continue
    const [from, ...to] = line.split(' ').map(hex => String.fromCodePoint(parseInt(hex, 16)))
    prototypes.set(from, to.join(''))
  }
  return prototypes
}

const DIACRITICS = /[\u0300-\u036f]/g

/** An address's confusable skeleton (UTS #39, diacritics dropped). */
export function emailSkeleton (email: string): string {
  const table = prototypeTable()
  let mapped = ''
  for (const ch of email.normalize('NFD')) mapped += table.get(ch) ?? ch
  return mapped.normalize('NFD').replace(DIACRITICS, '')
}

/** The skeleton as stored: a fixed-length digest, so any address fits the unique index. */
export function emailSkeletonKey (email: string): string {
  return createHash('sha256').update(emailSkeleton(email)).digest('hex')
}

/** Characters that go with any script. */
const ANY_SCRIPT = new Set(['Zyyy', 'Zinh', 'Qaai'])

/** UTS #39's augmented script sets: Han writing mixes with these. */
const AUGMENTED: Record<string, string[]> = {
  Hani: ['Hanb', 'Jpan', 'Kore'],
  Hira: ['Jpan'],
  Kana: ['Jpan'],
  Hang: ['Kore'],
  Bopo: ['Hanb'],
}

let scriptPatterns: Array<[string, RegExp]> | undefined

/** A character's scripts (augmented), or undefined when it goes with any. */
function scriptsOf (ch: string): Set<string> | undefined {
  // Plain ASCII letters are Latin, and digits and punctuation go with any script.
  if (ch <= '\u007f') return /[a-z]/i.test(ch) ? new Set(['Latn']) : undefined
  scriptPatterns ??= SCRIPTS.map(code => [code, new RegExp(`^\\p{Script_Extensions=${code}}$`, 'u')])
  const found = new Set<string>()
  for (const [code, pattern] of scriptPatterns) {
    if (!pattern.test(ch)) continue
    if (ANY_SCRIPT.has(code)) return undefined
    found.add(code)
    for (const extra of AUGMENTED[code] ?? []) found.add(extra)
  }
  return found
}

/** Whether one part of an address is written in a single script. */
function singleScript (part: string): boolean {
  let common: Set<string> | undefined
  for (const ch of part) {
    const scripts = scriptsOf(ch)
    if (scripts === undefined) continue
    common = common === undefined ? scripts : new Set([...common].filter(code => scripts.has(code)))
    if (common.size === 0) return false
  }
  return true
}

/** Whether an address mixes scripts within its local part or within one label of its domain. */
export function mixesScripts (email: string): boolean {
  const at = email.lastIndexOf('@')
  const parts = [email.slice(0, at), ...email.slice(at + 1).split('.')]
  return !parts.every(singleScript)
}
