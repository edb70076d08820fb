// What an API key looks like and how it is stored. A key is `sk-chatd-` plus 32
// random base62 characters (~190 bits). Only its SHA-256 is kept; a plain hash
// is enough because the key is random (no dictionary to attack), and it keeps
// every request's check to one hash. The display prefix (`sk-chatd-` + the first
// 6 random characters) names a key in listings and `chatd keys revoke`.

import { createHash, randomInt, timingSafeEqual } from 'node:crypto'

export const KEY_SCHEME = 'sk-chatd-'
const RANDOM_LENGTH = 32
const PREFIX_RANDOM_LENGTH = 6
const BASE62 = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789'
const KEY_PATTERN = /^sk-chatd-[A-Za-z0-9]{32}$/

export function generateApiKey (): string {
  let random = ''
  // randomInt draws uniformly (no modulo bias) from the CSPRNG.
  for (let i = 0; i < RANDOM_LENGTH; i++) random += BASE62[randomInt(BASE62.length)]
  return KEY_SCHEME + random
}

export function isWellFormedApiKey (key: string): boolean {
  return KEY_PATTERN.test(key)
}

export function apiKeyPrefix (key: string): string {
  return key.slice(0, KEY_SCHEME.length + PREFIX_RANDOM_LENGTH)
}

export function hashApiKey (key: string): string {
  return createHash('sha256').update(key).digest('hex')
}

/** Constant-time comparison of two hex SHA-256 digests. */
export function sameHash (a: string, b: string): boolean {
  const left = Buffer.from(a, 'hex')
  const right = Buffer.from(b, 'hex')
  return left.length === right.length && timingSafeEqual(left, right)
}
