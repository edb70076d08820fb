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
// xgrammar reports a schema it cannot take (an unknown type, a $ref to nowhere,
// a bad pattern) by aborting the instance after logging "[FATAL] <reason>".
// An aborted instance may keep a broken stack, so every schema is first
// converted by a throwaway checker instance, replaced after each failure; only
// schemas it took reach the instance that holds the vocabulary and the
// sequences' matchers. The checker's log gives the client the reason.
import { readFileSync } from 'node:fs'
import { createRequire } from 'node:module'
import { dirname } from 'node:path'
import type * as XGrammar from '@mlc-ai/web-xgrammar'
import type { ResponseFormat } from '../backend.ts'
import { ApiError } from '../../errors.ts'

type XGrammarModule = typeof XGrammar
type JsonFormat = Exclude<ResponseFormat, { type: 'text' }>

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
function schemaOf (format: JsonFormat): { schema: string; strict: boolean } {
  if (format.type === 'json_schema' && format.json_schema.schema !== undefined) {
    return { schema: JSON.stringify(format.json_schema.schema), strict: format.json_schema.strict === true }
  }
  // json_object, or json_schema without a schema: any JSON object.
  return { schema: '{"type":"object"}', strict: false }
}

function invalidSchema (reason: string | undefined): ApiError {
  return new ApiError('invalid_parameter',
    `response_format: the JSON schema cannot be used for structured output${reason ? `: ${reason}` : ''}.`, { param: 'response_format' })
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
interface EngineInstance {
  xg: XGrammarModule
  compiler: XGrammar.GrammarCompiler
  stopIds: number[]
}

/**
 * One model's grammars: the vocabulary prepared once (on first use), compiled grammars cached by
 * schema, a matcher per sequence.
 */
export class Grammars {
  readonly #vocabulary: () => GrammarVocabulary
  #engine: Promise<EngineInstance> | undefined
  #checker: { xg: XGrammarModule; log: string[] } | undefined
  /** Checks run one at a time: a failed one replaces the checker the next must not share. */
  #checking: Promise<void> = Promise.resolve()
  /** Compiled grammars (or their failure) by schema, least recently used first. */
  readonly #cache = new Map<string, Promise<XGrammar.CompiledGrammar>>()

  constructor (vocabulary: () => GrammarVocabulary) {
    this.#vocabulary = vocabulary
  }

  /** Compiles the format's grammar (or finds it cached); throws ApiError invalid_parameter naming response_format when it cannot. */
  compile (format: JsonFormat): Promise<XGrammar.CompiledGrammar> {
    const { schema, strict } = schemaOf(format)
    const key = `${strict ? 'strict' : 'loose'}:${schema}`
    let compiled = this.#cache.get(key)
    if (compiled) {
      this.#cache.delete(key)
    } else {
      compiled = this.#compile(schema, strict)
      compiled.catch(() => {}) // a failure is kept, and reported to whoever awaits it
    }
    this.#cache.set(key, compiled)
    while (this.#cache.size > CACHE_SIZE) {
      const [oldest, evicted] = this.#cache.entries().next().value as [string, Promise<XGrammar.CompiledGrammar>]
      this.#cache.delete(oldest)
      // Matchers made from it keep their own reference.
      evicted.then(grammar => grammar.dispose(), () => {})
    }
    return compiled
  }

  /** A matcher for one sequence, from the format's compiled grammar. */
  async constraint (format: JsonFormat): Promise<GrammarConstraint> {
    const grammar = await this.compile(format)
    const engine = await this.#engineInstance()
    const matcher = await engine.xg.GrammarMatcher.createGrammarMatcher(grammar, engine.stopIds)
    return new GrammarConstraint(matcher)
  }

  async #compile (schema: string, strict: boolean): Promise<XGrammar.CompiledGrammar> {
    await this.#check(schema, strict)
    const engine = await this.#engineInstance()
    try {
      return await engine.compiler.compileJSONSchema(schema, ANY_WHITESPACE, ONE_LINE, undefined, strict)
    } catch (err) {
      throw invalidSchema((err as Error).message)
    }
  }

  /** Converts the schema in the throwaway instance; a schema it refuses is a 400 with xgrammar's reason. */
  #check (schema: string, strict: boolean): Promise<void> {
    const done = this.#checking.then(() => this.#checkNow(schema, strict))
    this.#checking = done.catch(() => {})
    return done
  }

  async #checkNow (schema: string, strict: boolean): Promise<void> {
    if (!this.#checker) {
      const log: string[] = []
      this.#checker = { xg: newInstance(line => { log.push(line) }), log }
    }
    const checker = this.#checker
    checker.log.length = 0
    try {
      const grammar = await checker.xg.Grammar.fromJSONSchema(schema, ANY_WHITESPACE, ONE_LINE, undefined, strict)
      grammar.dispose()
    } catch {
      this.#checker = undefined // aborted: never used again
      throw invalidSchema(reasonOf(checker.log))
    }
  }

  /** Made once, on the first JSON request: a model that never gets one never pays for the vocabulary. */
  #engineInstance (): Promise<EngineInstance> {
    this.#engine ??= (async () => {
      const xg = newInstance(() => {})
      const vocabulary = this.#vocabulary()
      // Each entry is the token's bytes ('raw': nothing to decode); embind takes a Uint8Array as std::string.
      const info = await xg.TokenizerInfo.createTokenizerInfo(vocabulary.bytes as unknown as string[], 'raw', false, vocabulary.vocabSize, vocabulary.stopIds)
      // Our own cache (above) decides what stays compiled.
      const compiler = await xg.GrammarCompiler.createGrammarCompiler(info, false)
      return { xg, compiler, stopIds: vocabulary.stopIds }
    })()
    return this.#engine
  }
}

/**
 * One sequence's grammar state. Each step: `prepare()` computes the mask of allowed next tokens,
 * `apply()` sets every other token's logit to -Infinity, and the sampled token goes to `accept()`.
 */
export class GrammarConstraint {
  readonly #matcher: XGrammar.GrammarMatcher
  #mask: Int32Array | null = null
  #disposed = false

  constructor (matcher: XGrammar.GrammarMatcher) {
    this.#matcher = matcher
  }

  /** Computes the next step's mask. */
  async prepare (): Promise<void> {
    this.#mask = await this.#matcher.getNextTokenBitmask()
  }

  /** Masks out, in `logits[0..n)`, every token the grammar does not allow next (the mask of the last prepare()). */
  apply (logits: Float32Array, n: number): void {
    const mask = this.#mask
    if (!mask) throw new Error('GrammarConstraint.apply before prepare')
    applyTokenMask(logits, n, mask)
  }

  /** Takes the sampled token; false when the grammar does not allow it. */
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
