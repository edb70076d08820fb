// Tiers: what an account may do, as plain configuration (TIERS_FILE, default
// tiers.json). Per tier: requests and tokens per minute, calls per calendar
// month (the allowance), the most tokens one request may ask for, which
// models it may use, and how a prompt token served from the account's own
// prefix cache counts against the minute. A limit that is null or left out
// does not apply.
//
//   { "default": "free",
//     "tiers": { "free": { "requests_per_minute": 10, "tokens_per_minute": 20000,
//                          "calls_per_month": 1000, "max_tokens_per_request": 2048, "models": ["*"] } } }
//
// The file is read at start; an account keeps its tier's name in the
// database, so editing a tier's numbers and restarting changes them for
// everyone on it.

import { readFileSync } from 'node:fs'
import { Type, type Static } from 'typebox'
import { Compile } from 'typebox/compile'
import { ConfigError } from '../config.ts'

const Limit = (description: string) => Type.Optional(Type.Union([Type.Integer({ minimum: 0 }), Type.Null()], { description }))

const TierEntry = Type.Object({
  requests_per_minute: Limit('Chat completions per rolling minute, across all of the account\'s keys.'),
  tokens_per_minute: Limit('Prompt + completion tokens per rolling minute.'),
  calls_per_month: Limit('Chat completions per calendar month (UTC): the allowance.'),
  max_tokens_per_request: Limit('The most completion tokens one request may ask for; also its max_tokens when it sends none.'),
  models: Type.Optional(Type.Array(Type.String({ minLength: 1 }), { description: 'Model ids the tier may use; "*" matches any run of characters.' })),
  cached_prompt_tokens_weight: Type.Optional(Type.Number({ minimum: 0, maximum: 1, description: 'How a prompt token served from the account\'s own prefix cache counts against tokens_per_minute (0: not at all, 1: as any other); default 0.1.' })),
}, { additionalProperties: false })

const TiersFile = Type.Object({
  default: Type.Optional(Type.String({ minLength: 1 })),
  tiers: Type.Record(Type.String({ pattern: '^[A-Za-z0-9_.-]{1,64}$' }), TierEntry),
})

const checkFile = Compile(TiersFile)

export interface Tier {
  name: string
  requestsPerMinute: number | null
  tokensPerMinute: number | null
  callsPerMonth: number | null
  maxTokensPerRequest: number | null
  models: string[]
  /** How a cached prompt token counts against tokensPerMinute (0..1). */
  cachedPromptTokensWeight: number
}

/**
 * A cached prompt token's weight when a tier says none: a tenth. Serving it costs a copy, not a
 * computation (Anthropic counts cached input tokens not at all towards input tokens per minute;
 * chatd keeps a tenth so a flood of cached prompts is still bounded).
 */
export const DEFAULT_CACHED_PROMPT_TOKENS_WEIGHT = 0.1

/** A bad tiers file is a configuration error: the server does not start, and says why. */
export class TiersFileError extends ConfigError {
  constructor (message: string) {
    super(message)
    this.name = 'TiersFileError'
  }
}

/** "*" matches any run of characters; everything else is literal. */
function modelPattern (glob: string): RegExp {
  // dotAll: `*` stands for any characters, line breaks included ("*" allows every id, whatever it holds).
  return new RegExp('^' + glob.split('*').map(part => part.replace(/[.+?^${}()|[\]\\]/g, '\\$&')).join('.*') + '$', 's')
}

export class Tiers {
  readonly #tiers: Map<string, Tier>
  readonly #patterns: Map<string, RegExp[]>
  readonly defaultName: string

  constructor (tiers: Tier[], defaultName: string) {
    this.#tiers = new Map(tiers.map(t => [t.name, t]))
    this.#patterns = new Map(tiers.map(t => [t.name, t.models.map(modelPattern)]))
    if (!this.#tiers.has(defaultName)) throw new TiersFileError(`the default tier "${defaultName}" is not defined`)
    this.defaultName = defaultName
  }

  static parse (text: string, source = 'tiers.json'): Tiers {
    let doc: unknown
    try {
      doc = JSON.parse(text)
    } catch (err) {
      throw new TiersFileError(`${source}: not valid JSON: ${(err as Error).message}`)
    }
    if (!checkFile.Check(doc)) {
      const problems = checkFile.Errors(doc).map(e => `${e.instancePath.replace(/^\//, '').replaceAll('/', '.') || '(top level)'} ${e.message}`)
      throw new TiersFileError(`${source}: ${[...new Set(problems)].slice(0, 5).join('; ')}`)
    }
    const file = doc as Static<typeof TiersFile>
    const tiers = Object.entries(file.tiers).map(([name, t]): Tier => ({
      name,
      requestsPerMinute: t.requests_per_minute ?? null,
      tokensPerMinute: t.tokens_per_minute ?? null,
      callsPerMonth: t.calls_per_month ?? null,
      maxTokensPerRequest: t.max_tokens_per_request ?? null,
      models: t.models ?? ['*'],
      cachedPromptTokensWeight: t.cached_prompt_tokens_weight ?? DEFAULT_CACHED_PROMPT_TOKENS_WEIGHT,
    }))
    try {
      return new Tiers(tiers, file.default ?? 'free')
    } catch (err) {
      throw new TiersFileError(`${source}: ${(err as Error).message}`)
    }
  }

  static fromFile (path: string): Tiers {
    let text: string
    try {
      text = readFileSync(path, 'utf8')
    } catch (err) {
      throw new TiersFileError(`TIERS_FILE ${path}: cannot be read: ${(err as Error).message}`)
    }
    return Tiers.parse(text, `TIERS_FILE ${path}`)
  }

  names (): string[] {
    return [...this.#tiers.keys()]
  }

  has (name: string): boolean {
    return this.#tiers.has(name)
  }

  get (name: string): Tier | undefined {
    return this.#tiers.get(name)
  }

  /**
   * The tier an account on `name` gets. An account whose tier was removed from
   * the file falls back to the default tier rather than to no limits at all.
   */
  resolve (name: string): Tier {
    return this.#tiers.get(name) ?? this.#tiers.get(this.defaultName)!
  }

  allowsModel (tier: Tier, model: string): boolean {
    return (this.#patterns.get(tier.name) ?? tier.models.map(modelPattern)).some(p => p.test(model))
  }
}
