// What every fuzz property of POST /api/v1/chat/completions checks, and how
// long it runs. CI runs few cases per property with a fixed seed (the same
// cases every time, seconds per file); `npm run fuzz` sets CHATD_FUZZ_RUNS
// (20000 by default) for the long run. CHATD_FUZZ_SEED picks another seed.

import { createParser } from 'eventsource-parser'
import fc from 'fast-check'
import type { Test } from 'tap'
import { Compile } from 'typebox/compile'
import { ChatCompletion, ChatCompletionChunk } from '../../src/api/chat/schema.ts'
import { ERROR_TABLE } from '../../src/errors.ts'

export const FUZZ_SEED = Number(process.env.CHATD_FUZZ_SEED ?? 20250519)

/**
 * Cases for one property: `ciRuns` by default; with CHATD_FUZZ_RUNS set, that
 * many times `weight` (slow properties, such as those on the real engine, take
 * a share of the long run).
 */
export function fuzzRuns (ciRuns: number, weight = 1): number {
  const asked = Number(process.env.CHATD_FUZZ_RUNS)
  return Number.isInteger(asked) && asked > 0 ? Math.max(1, Math.round(asked * weight)) : ciRuns
}

/** fast-check settings for one property: the fixed seed and the run count. */
export function fuzzParameters (numRuns: number): { seed: number, numRuns: number } {
  return { seed: FUZZ_SEED, numRuns }
}

/** Rejects when `promise` takes longer than `ms`: a hang is a failure with its own message. */
export async function withinDeadline<T> (promise: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined
  const deadline = new Promise<never>((_resolve, reject) => { timer = setTimeout(() => reject(new Error(`hang: ${what} took longer than ${ms} ms`)), ms) })
  try {
    return await Promise.race([promise, deadline])
  } finally {
    clearTimeout(timer)
  }
}

export interface Answer {
  statusCode: number
  headers: Record<string, string | string[] | number | undefined>
  payload: string
}

const checkCompletion = Compile(ChatCompletion)
const checkChunk = Compile(ChatCompletionChunk)

/** What a response turned out to be, for the tallies a fuzz test prints. */
export type Outcome = `${number} ${string}`

/**
 * Throws (with what was wrong) unless the response is one the API promises:
 * a 4xx whose body is exactly {error:{message,type,param,code}} with the code,
 * type and status of src/errors.ts's table; a 200 chat.completion; or a 200
 * SSE stream of chat.completion.chunk frames ending in [DONE]. Never a 5xx.
 */
export function checkAnswer (res: Answer): Outcome {
  const type = String(res.headers['content-type'] ?? '')
  if (res.statusCode >= 500) throw new Error(`${res.statusCode}: ${res.payload.slice(0, 500)}`)
  if (res.statusCode === 200 && type.startsWith('text/event-stream')) return checkStream(res.payload)
  if (res.statusCode === 200) {
    const body = parseJson(res.payload, type)
    if (!checkCompletion.Check(body)) throw new Error(`200 body is not a chat.completion: ${[...checkCompletion.Errors(body)].map(e => `${e.instancePath} ${e.message}`).join('; ')}`)
    const { choices, usage } = body
    if (choices.length !== 1) throw new Error(`200 with ${choices.length} choices`)
    if (usage.total_tokens !== usage.prompt_tokens + usage.completion_tokens) throw new Error(`usage does not add up: ${JSON.stringify(usage)}`)
    return `200 ${choices[0].finish_reason}`
  }
  if (res.statusCode >= 400 && res.statusCode < 500) {
    const code = checkErrorBody(parseJson(res.payload, type), res.statusCode)
    return `${res.statusCode} ${code}`
  }
  throw new Error(`unexpected status ${res.statusCode}: ${res.payload.slice(0, 200)}`)
}

function parseJson (payload: string, type: string): unknown {
  if (!type.startsWith('application/json')) throw new Error(`content-type ${JSON.stringify(type)}, not JSON: ${payload.slice(0, 200)}`)
  try {
    return JSON.parse(payload)
  } catch {
    throw new Error(`body is not JSON: ${payload.slice(0, 200)}`)
  }
}

/** The exact error shape, with the table's status and type for its code; returns the code. */
export function checkErrorBody (body: unknown, status: number): string {
  const shape = '{error:{message,type,param,code}}'
  if (!isObject(body) || Object.keys(body).join() !== 'error' || !isObject(body.error)) throw new Error(`error body is not ${shape}: ${JSON.stringify(body).slice(0, 300)}`)
  const e = body.error
  if (Object.keys(e).sort().join() !== 'code,message,param,type') throw new Error(`error keys ${Object.keys(e).join()}, not message,type,param,code`)
  if (typeof e.message !== 'string' || e.message === '') throw new Error('error.message is not a non-empty string')
  if (!(e.param === null || typeof e.param === 'string')) throw new Error('error.param is not a string or null')
  const row = typeof e.code === 'string' ? ERROR_TABLE[e.code as keyof typeof ERROR_TABLE] : undefined
  if (!row || !Object.hasOwn(ERROR_TABLE, e.code as string)) throw new Error(`error.code ${JSON.stringify(e.code)} is not in src/errors.ts`)
  if (row.status !== status) throw new Error(`code ${e.code} goes with ${row.status}, got ${status}`)
  if (row.type !== e.type) throw new Error(`code ${e.code} goes with type ${row.type}, got ${JSON.stringify(e.type)}`)
  return e.code as string
}

/** A stream: a role chunk, deltas, a finish chunk, an optional usage chunk, then [DONE]; every frame valid. */
function checkStream (payload: string): Outcome {
  const frames: string[] = []
  const parser = createParser({ onEvent: e => { frames.push(e.data) } })
  parser.feed(payload)
  if (frames.at(-1) !== '[DONE]') {
    const last = frames.at(-1)
    // A failure after the stream started arrives as an error frame; for the fuzzer that is a finding too.
    throw new Error(`stream did not end with [DONE]; last frame: ${last?.slice(0, 300)}`)
  }
  const chunks = frames.slice(0, -1).map(f => JSON.parse(f) as unknown)
  let finish: string | undefined
  chunks.forEach((chunk, i) => {
    if (!checkChunk.Check(chunk)) throw new Error(`frame ${i} is not a chat.completion.chunk: ${JSON.stringify(chunk).slice(0, 300)}`)
    if (i === 0 && chunk.choices[0]?.delta.role !== 'assistant') throw new Error('the first frame is not the role chunk')
    const reason = chunk.choices[0]?.finish_reason
    if (reason) {
      if (finish) throw new Error('two finish chunks')
      finish = reason
    } else if (finish && chunk.choices.length > 0) {
      throw new Error('a delta after the finish chunk')
    }
  })
  if (!finish) throw new Error('stream without a finish chunk')
  return `200 stream ${finish}`
}

function isObject (value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value)
}

/**
 * `text` with what a TAP stream cannot carry written as escapes: line and paragraph separators and
 * other control characters (a YAML reader takes U+2028 for a line break, and a failure's report
 * was lost with it) and lone surrogates.
 */
export function readable (text: string): string {
  // eslint-disable-next-line no-control-regex -- control characters are what this escapes
  return text.toWellFormed().replace(/[\u0000-\u0009\u000b-\u001f\u007f\u2028\u2029]/g, c => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`)
}

/**
 * fc.assert with the file's seed and `runs` cases; a property that fails is reported by t.fail,
 * its counterexample and cause cut to a readable length and written as text TAP can carry
 * (readable): thrown whole, a counterexample holding U+2028 made tap lose the report.
 */
export async function assertHolds<T> (t: Pick<Test, 'fail'>, property: fc.IRawProperty<T>, runs: number): Promise<void> {
  try {
    await fc.assert(property, fuzzParameters(runs))
  } catch (err) {
    const failure = err as Error
    t.fail(readable(`${failure.message.slice(0, 2000)}; cause: ${String((failure.cause as Error | undefined)?.message).slice(0, 1000)}`))
  }
}

/** Counts outcomes so a test can print what its cases exercised. */
export class Tally {
  readonly #counts = new Map<string, number>()
  cases = 0

  add (outcome: string): void {
    this.cases++
    this.#counts.set(outcome, (this.#counts.get(outcome) ?? 0) + 1)
  }

  toString (): string {
    return [...this.#counts].sort((a, b) => b[1] - a[1]).map(([k, n]) => `${k}: ${n}`).join(', ')
  }
}

/** Object.prototype untouched: no request may have polluted it. */
export function prototypeIsClean (): boolean {
  const probe = {} as Record<string, unknown>
  return Object.getOwnPropertyNames(Object.prototype).sort().join() === PROTOTYPE_NAMES && probe.polluted === undefined && probe.isAdmin === undefined
}
const PROTOTYPE_NAMES = Object.getOwnPropertyNames(Object.prototype).sort().join()
