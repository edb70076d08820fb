// Sealed reasoning: the model's thinking handed to a client as an opaque value
// it sends back on a later turn (the Responses API's `encrypted_content`, the
// Messages API's thinking `signature`). Sealed with AES-256-GCM under a key
// only the server holds, bound to the account it was written for: a value
// chatd did not write, or wrote for another account, opens to nothing — never
// an error, never decoded (the caller then treats the item as if it carried no
// sealed text).

import { createCipheriv, createDecipheriv, hkdfSync, randomBytes } from 'node:crypto'

const PREFIX = 'chatd1.'
const IV_BYTES = 12
const TAG_BYTES = 16
/** The longest sealed value opened (a bound on the work a hostile value can cause). */
export const SEALED_MAX_CHARS = 1_000_000

/** What else a sealed value may hold besides the thinking. */
export type SealPurpose = 'web_search_result'

/** The authenticated data a value is sealed under: the account, and the use when it is not the thinking. */
const boundTo = (account: string | number, purpose?: SealPurpose): Buffer => Buffer.from(purpose ? `${account}|${purpose}` : String(account))

export class ReasoningSeal {
  readonly #key: Buffer

  /** `secret`: the server's (shared by every replica, e.g. kept in the database's settings). */
  constructor (secret: string) {
    this.#key = Buffer.from(hkdfSync('sha256', secret, 'chatd reasoning seal', 'aes-256-gcm key', 32))
  }

  /**
   * The opaque value for `text`, readable back only by this server for `account` and `purpose`
   * (none: the thinking; 'web_search_result': a search result's text), so a value sealed for one
   * use never opens as another.
   */
  seal (account: string | number, text: string, purpose?: SealPurpose): string {
    const iv = randomBytes(IV_BYTES)
    const cipher = createCipheriv('aes-256-gcm', this.#key, iv)
    cipher.setAAD(boundTo(account, purpose))
    const sealed = Buffer.concat([cipher.update(text, 'utf8'), cipher.final()])
    return PREFIX + Buffer.concat([iv, sealed, cipher.getAuthTag()]).toString('base64url')
  }

  /** The text sealed for `account` and `purpose`, or undefined for anything else (another account's or use's, altered, not ours). */
  open (account: string | number, value: unknown, purpose?: SealPurpose): string | undefined {
    if (typeof value !== 'string' || !value.startsWith(PREFIX) || value.length > SEALED_MAX_CHARS) return undefined
    const bytes = Buffer.from(value.slice(PREFIX.length), 'base64url')
    if (bytes.length < IV_BYTES + TAG_BYTES) return undefined
    try {
      const decipher = createDecipheriv('aes-256-gcm', this.#key, bytes.subarray(0, IV_BYTES))
      decipher.setAAD(boundTo(account, purpose))
      decipher.setAuthTag(bytes.subarray(bytes.length - TAG_BYTES))
      return Buffer.concat([decipher.update(bytes.subarray(IV_BYTES, bytes.length - TAG_BYTES)), decipher.final()]).toString('utf8')
    } catch {
      return undefined
    }
  }
}
