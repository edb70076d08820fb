// Reads numeric fields of a Hugging Face config.json with errors that name the
// file and the field; shared by the model loader and the model builder.

type Json = Record<string, unknown>

/** A reader of positive-integer fields of `raw`; `fail` makes the error the caller throws. */
export function positiveIntegers (raw: Json, source: string, fail: (message: string) => Error = m => new Error(m)) {
  return (key: string, fallback?: number): number => {
    const v = raw[key] ?? fallback
    if (typeof v !== 'number' || !Number.isInteger(v) || v <= 0) {
      throw fail(`${source}: ${key} must be a positive integer (got ${JSON.stringify(raw[key])})`)
    }
    return v
  }
}
