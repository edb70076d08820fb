// Structured output: a JSON `response_format` becomes a grammar over the
// model's vocabulary, and each step the grammar says which tokens may come
// next. The grammar engine is xgrammar's WebAssembly build
// (@mlc-ai/web-xgrammar): it compiles a JSON schema against the vocabulary
// once, then a matcher per sequence gives a token bitmask per step (one bit per
// id, 1 = allowed) and takes each sampled token.
//
// The package ships a UMD bundle that calls require() but says "type":
// "module", so Node would load it as an ES module, where require does not
// exist. It is run here as the CommonJS it is, with createRequire's require;
// each run is a separate WebAssembly instance with its own memory.
//
// This module is one instance's side: it runs inside a grammar worker
// (grammar-worker.ts), never on the event loop or the engine's thread, because
// a compile can take seconds, trap, or grow memory for good. xgrammar reports a
// schema it cannot take (an unknown type, a bad pattern) by aborting the
// instance after logging "[FATAL] <reason>"; an aborted instance may keep a
// broken stack, so `broken` tells its worker to end.
import { readFileSync } from 'node:fs'
import { createRequire } from 'node:module'
import { dirname } from 'node:path'
import type * as XGrammar from '@mlc-ai/web-xgrammar'
import type { ResponseFormat } from '../../backend.ts'
import { ApiError } from '../../../errors.ts'

type XGrammarModule = typeof XGrammar
export type JsonFormat = Exclude<ResponseFormat, { type: 'text' }>

const require = createRequire(import.meta.url)
let bundle: { file: string; source: string } | undefined

/** A fresh xgrammar instance; what it prints (its FATAL reasons) goes to `log`. */
function newInstance (log: (line: string) => void): XGrammarModule {
  if (!bundle) {
    const file = require.resolve('@mlc-ai/web-xgrammar')
    bundle = { file, source: readFileSync(file, 'utf8') }
  }
  const module = { exports: {} }
  const print = (...args: unknown[]): void => log(args.map(String).join(' '))
  const quiet = { ...console, log: print, info: print, warn: print, error: print }
  // The CommonJS wrapper, with `console` as one more name the bundle sees, so its messages come here.
  // eslint-disable-next-line no-new-func -- the bundle must run as CommonJS (see above); it is the package's own file
  const run = new Function('exports', 'require', 'module', '__filename', '__dirname', 'console', bundle.source)
  run(module.exports, createRequire(bundle.file), module, bundle.file, dirname(bundle.file), quiet)
  return module.exports as XGrammarModule
}

/** The last reason xgrammar logged ("[FATAL] path/file.cc:902: Unsupported type ..." -> "Unsupported type ..."). */
function reasonOf (lines: string[]): string | undefined {
  const fatal = lines.findLast(line => line.includes('[FATAL]'))
  if (fatal === undefined) return undefined
  return fatal.replace(/^.*\[FATAL\]\s*(\S+:\d+:\s*)?/, '').replace(/^Check failed: \(.*?\) is false:\s*/, '').slice(0, 300)
}

/** How every JSON format is compiled: one line (`{"a": 1, "b": [2, 3]}`), so a model cannot fill the reply with whitespace. */
const ANY_WHITESPACE = false
const ONE_LINE = -1

/** The schema a format stands for, and whether properties it does not name are refused (strict). */
export function schemaOf (format: JsonFormat): { schema: string; strict: boolean } {
  if (format.type === 'json_schema' && format.json_schema.schema !== undefined) {
    return { schema: JSON.stringify(format.json_schema.schema), strict: format.json_schema.strict === true }
  }
  // json_object, or json_schema without a schema: any JSON object.
  return { schema: '{"type":"object"}', strict: false }
}

export function invalidSchema (reason: string | undefined): ApiError {
  return new ApiError('invalid_parameter',
    `the JSON schema cannot be used for structured output${reason ? `: ${reason}` : ''}.`, { param: 'response_format' })
}

/** What the grammar needs from the model: each id's bytes (empty for special tokens), the logits' width, the end-of-sequence ids. */
export interface GrammarVocabulary {
  bytes: Uint8Array[]
  vocabSize: number
  stopIds: number[]
}

/** Distinct schemas kept compiled; the least recently used is let go beyond this. */
const CACHE_SIZE = 64

/** The instance that holds the vocabulary, compiles the grammars and runs the matchers. */
interface Instance {
  xg: XGrammarModule
  compiler: XGrammar.GrammarCompiler
  stopIds: number[]
}

/** A JSON format with the scope its compiled grammar is cached under (an account: no account sees another's cache). */
export interface ScopedFormat {
  format: JsonFormat
  scope: string
}

/** The cache key of a format in a scope. */
export function grammarKey ({ format, scope }: ScopedFormat): string {
  const { schema, strict } = schemaOf(format)
  return `${scope}\u0000${strict ? 'strict' : 'loose'}\u0000${schema}`
}

/**
 * One instance's grammars: the vocabulary prepared once (on first use), compiled grammars cached
 * by key, a matcher per sequence.
 */
export class Grammars {
  readonly #vocabulary: () => GrammarVocabulary
  #instance: Promise<Instance> | undefined
  readonly #log: string[] = []
  /** The instance aborted: nothing more may run in it. */
  broken = false
  /** Compiled grammars by key, least recently used first. */
  readonly #cache = new Map<string, XGrammar.CompiledGrammar>()

  constructor (vocabulary: () => GrammarVocabulary) {
    this.#vocabulary = vocabulary
  }

  /** Makes the instance and prepares the vocabulary now, so a compile's time is the compile's alone. */
  async prepare (): Promise<void> {
    await this.#instanceNow()
  }

  /** Whether the key's grammar is compiled here. */
  has (key: string): boolean {
    return this.#cache.has(key)
  }

  /** Compiles the format's grammar (or finds it cached); throws ApiError invalid_parameter naming response_format when it cannot. */
  async compile (format: JsonFormat, key = grammarKey({ format, scope: '' })): Promise<XGrammar.CompiledGrammar> {
    let compiled = this.#cache.get(key)
    if (compiled) {
      this.#cache.delete(key)
    } else {
      const { schema, strict } = schemaOf(format)
      const instance = await this.#instanceNow()
      this.#log.length = 0
      try {
        compiled = await instance.compiler.compileJSONSchema(schema, ANY_WHITESPACE, ONE_LINE, undefined, strict)
      } catch (err) {
        this.broken = true
        throw invalidSchema(reasonOf(this.#log) ?? (err as Error).message)
      }
    }
    this.#cache.set(key, compiled)
    while (this.#cache.size > CACHE_SIZE) {
      const [oldest, evicted] = this.#cache.entries().next().value as [string, XGrammar.CompiledGrammar]
      this.#cache.delete(oldest)
      evicted.dispose() // matchers made from it keep their own reference
    }
    return compiled
  }

  /** Lets every compiled grammar go (a serving worker handed to another scope keeps none of the last's). */
  clear (): void {
    for (const compiled of this.#cache.values()) compiled.dispose()
    this.#cache.clear()
  }

  /** A matcher for one sequence, from the format's compiled grammar. */
  async constraint (format: JsonFormat, key?: string): Promise<LocalConstraint> {
    const grammar = await this.compile(format, key)
    const instance = await this.#instanceNow()
    const matcher = await instance.xg.GrammarMatcher.createGrammarMatcher(grammar, instance.stopIds)
    return new LocalConstraint(matcher)
  }

  /** Made once, on the first JSON request: a model that never gets one never pays for the vocabulary. */
  #instanceNow (): Promise<Instance> {
    this.#instance ??= (async () => {
      const xg = newInstance(line => { this.#log.push(line) })
      const vocabulary = this.#vocabulary()
      // Each entry is the token's bytes ('raw': nothing to decode); embind takes a Uint8Array as std::string.
      const info = await xg.TokenizerInfo.createTokenizerInfo(vocabulary.bytes as unknown as string[], 'raw', false, vocabulary.vocabSize, vocabulary.stopIds)
      // Our own cache (above) decides what stays compiled.
      const compiler = await xg.GrammarCompiler.createGrammarCompiler(info, false)
      return { xg, compiler, stopIds: vocabulary.stopIds }
    })()
    return this.#instance
  }
}

/**
 * One sequence's grammar state. Each step: `prepare()` computes the mask of allowed next tokens,
 * `apply()` sets every other token's logit to -Infinity, and the sampled token goes to `accept()`.
 */
export interface Constraint {
  prepare (): Promise<void>
  /** Masks out, in `logits[0..n)`, every token the grammar does not allow next (the mask of the last prepare()). */
  apply (logits: Float32Array, n: number): void
  /** Takes the sampled token; false when the grammar does not allow it. */
  accept (id: number): boolean
  /** Lets go of the matcher. */
  dispose (): void
}

/** A constraint whose matcher is in this thread's instance (the grammar worker, the benchmark). */
export class LocalConstraint implements Constraint {
  readonly #matcher: XGrammar.GrammarMatcher
  #mask: Int32Array | null = null
  #disposed = false

  constructor (matcher: XGrammar.GrammarMatcher) {
    this.#matcher = matcher
  }

  async prepare (): Promise<void> {
    this.#mask = await this.#matcher.getNextTokenBitmask()
  }

  /** The mask of the last prepare(). */
  get mask (): Int32Array | null {
    return this.#mask
  }

  apply (logits: Float32Array, n: number): void {
    const mask = this.#mask
    if (!mask) throw new Error('a constraint applied before prepare()')
    applyTokenMask(logits, n, mask)
  }

  accept (id: number): boolean {
    this.#mask = null
    return this.#matcher.acceptToken(id)
  }

  /** The grammar has taken a stop token: the JSON is complete. */
  get terminated (): boolean {
    return this.#matcher.isTerminated()
  }

  dispose (): void {
    if (this.#disposed) return
    this.#disposed = true
    this.#matcher.dispose()
  }
}

/** Whether `mask` allows token `id`. */
export function maskAllows (mask: Int32Array, id: number): boolean {
  const word = id >>> 5
  return word < mask.length && (mask[word] & (1 << (id & 31))) !== 0
}

/** logits[id] = -Infinity for every id < n whose bit in `mask` is 0 (32 ids per word, lowest bit first). */
export function applyTokenMask (logits: Float32Array, n: number, mask: Int32Array): void {
  const words = Math.min(mask.length, Math.ceil(n / 32))
  for (let w = 0; w < words; w++) {
    const bits = mask[w]
    if (bits === -1) continue // all 32 allowed
    const base = w * 32
    const end = Math.min(base + 32, n)
    if (bits === 0) {
      logits.fill(-Infinity, base, end)
      continue
    }
    for (let id = base; id < end; id++) if ((bits & (1 << (id - base))) === 0) logits[id] = -Infinity
  }
  // Ids the mask does not cover (it spans the vocabulary the grammar knows) are not allowed either.
  if (words * 32 < n) logits.fill(-Infinity, words * 32, n)
}
