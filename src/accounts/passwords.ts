// Dashboard passwords: Argon2id via @node-rs/argon2 (prebuilt binaries shipped
// as optional dependencies, so nothing is compiled on install). The library's
// defaults are OWASP's Argon2id baseline: 19 MiB memory, 2 passes, 1 lane.
// The PHC string it returns carries the salt and the parameters, so raising
// them later still verifies old hashes.

import { hash, verify } from '@node-rs/argon2'

export const MIN_PASSWORD_LENGTH = 8
/** Long enough for any passphrase, short enough that hashing cannot be made expensive on purpose. */
export const MAX_PASSWORD_LENGTH = 256

/** Argon2id is the library's default algorithm; named here so a reader does not have to look it up. */
const ARGON2ID = 2

/** Why a password is unacceptable, or null when it is fine. */
export function passwordProblem (password: string): string | null {
  if (password.length < MIN_PASSWORD_LENGTH) return `The password must have at least ${MIN_PASSWORD_LENGTH} characters.`
  if (password.length > MAX_PASSWORD_LENGTH) return `The password must have at most ${MAX_PASSWORD_LENGTH} characters.`
  return null
}

export function hashPassword (password: string): Promise<string> {
  return hash(password, { algorithm: ARGON2ID })
}

/** A hash of nothing anyone knows, verified against when the account does not exist, so the answer takes as long either way. */
let decoy: Promise<string> | undefined

export async function verifyPassword (stored: string | null, password: string): Promise<boolean> {
  if (password.length > MAX_PASSWORD_LENGTH) return false
  if (stored === null) {
    decoy ??= hashPassword(`decoy-${Math.random()}`)
    await verify(await decoy, password).catch(() => false)
    return false
  }
  return verify(stored, password).catch(() => false)
}
