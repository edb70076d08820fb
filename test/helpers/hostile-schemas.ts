// The response_format schemas that once stopped or stalled the server, shared
// by the isolation tests and scripts/grammar-hostile.ts.

/** `$defs.d0 -> d1 -> ... -> d200`: the compiler's WebAssembly reads out of bounds. */
export function refChain (levels = 200): Record<string, unknown> {
  const defs: Record<string, unknown> = {}
  for (let i = 0; i < levels; i++) defs[`d${i}`] = { type: 'object', properties: { n: { $ref: `#/$defs/d${i + 1}` } } }
  defs[`d${levels}`] = { type: 'string' }
  return { $ref: '#/$defs/d0', $defs: defs }
}

/** Nested repetitions: seconds of compile even on a 512-token vocabulary (5 to 16 s on 2 cores). */
export const NESTED_PATTERN = { type: 'string', pattern: '^(((a|b){20}){20}){20}$' }

/**
 * The same, twelve at its outer level: a compile that is still slow beside a short reply (its trial
 * and its serving compile ~6 s together on a 2-core EPYC, where NESTED_PATTERN's take 15 s).
 */
export const SLOW_PATTERN = { type: 'string', pattern: '^(((a|b){20}){20}){12}$' }

/**
 * One more level of the same: no compile ends within any limit a test sets (over a minute on
 * stories260k), so a test that needs a compile still running, or timed out, never races its end.
 */
export const ENDLESS_PATTERN = { type: 'string', pattern: '^((((a|b){20}){20}){20}){20}$' }

/** Each level two ways to the next, 70 deep: the compile never ends. */
export function anyOfChain (levels = 70): Record<string, unknown> {
  const defs: Record<string, unknown> = {}
  for (let i = 0; i < levels; i++) {
    defs[`a${i}`] = { anyOf: [{ $ref: `#/$defs/a${i + 1}` }, { type: 'object', properties: { x: { $ref: `#/$defs/a${i + 1}` } }, required: ['x'] }] }
  }
  defs[`a${levels}`] = { type: 'string' }
  return { $ref: '#/$defs/a0', $defs: defs }
}
