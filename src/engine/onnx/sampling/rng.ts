/**
 * Seeded pseudo-random numbers for sampling, so a request's `seed` reproduces its output.
 *
 * xoshiro128** (Blackman & Vigna): 128-bit state, fast with 32-bit integer math in JS, good
 * statistical quality. The state is filled from the seed with splitmix32, the usual way to seed
 * xoshiro generators (it spreads nearby seeds such as 1, 2, 3 far apart).
 * Not for cryptography.
 */
import { randomInt } from 'node:crypto'

export interface Rng {
  /** The seed this generator started from (the random one when none was given): log it to
   * reproduce a run. */
  readonly seed: number;
  /** Uniform float in [0, 1). */
  next(): number;
  /** Uniform integer in [0, 2^32). */
  nextUint32(): number;
}

/** A random seed for requests that give none: a non-negative integer below 2^48. */
export function randomSeed (): number {
  return randomInt(0, 2 ** 48 - 1)
}

/** One splitmix32 step: advances `state[0]` and returns a well-mixed 32-bit word. */
function splitmix32 (state: Int32Array): number {
  state[0] = (state[0] + 0x9e3779b9) | 0
  let z = state[0]
  z = Math.imul(z ^ (z >>> 16), 0x85ebca6b)
  z = Math.imul(z ^ (z >>> 13), 0xc2b2ae35)
  return (z ^ (z >>> 16)) >>> 0
}

const rotl = (x: number, k: number) => (x << k) | (x >>> (32 - k))

/**
 * Creates a generator. The same seed always gives the same sequence. Seeds are integers (the API's
 * `seed`); fractional parts are dropped, and the full safe-integer range is used (both the low and
 * the high 32 bits feed the state).
 */
export function createRng (seed?: number): Rng {
  const used = seed === undefined ? randomSeed() : seed
  if (!Number.isFinite(used)) throw new RangeError(`seed must be a finite number, got ${used}`)
  const whole = Math.trunc(used)
  const lo = whole % 2 ** 32 | 0
  const hi = Math.floor(whole / 2 ** 32) | 0

  // Two splitmix streams, one from each half of the seed, combined word by word.
  const a = Int32Array.of(lo)
  const b = Int32Array.of(hi ^ 0x6a09e667)
  const s = new Uint32Array(4)
  for (let i = 0; i < 4; i++) s[i] = splitmix32(a) ^ rotl(splitmix32(b), 13)
  if ((s[0] | s[1] | s[2] | s[3]) === 0) s[0] = 1 // the all-zero state is a fixed point

  let s0 = s[0]; let s1 = s[1]; let s2 = s[2]; let s3 = s[3]
  const nextUint32 = (): number => {
    const result = Math.imul(rotl(Math.imul(s1, 5), 7), 9) >>> 0
    const t = s1 << 9
    s2 ^= s0
    s3 ^= s1
    s1 ^= s2
    s0 ^= s3
    s2 ^= t
    s3 = rotl(s3, 11)
    return result
  }
  return {
    seed: used,
    nextUint32,
    next: () => nextUint32() / 2 ** 32,
  }
}
