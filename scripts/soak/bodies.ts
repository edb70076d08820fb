// The soak's requests (scripts/soak.ts): request i carries schemas or tools no
// other request of the run carries (names and bounds made from i), as an
// agent's tools and a client's response formats differ from one caller to the
// next. Six kinds in turn, over the three doors.

export type SoakDoor = 'chat' | 'responses' | 'messages'

/** A small PRNG seeded by the request's number, so a run's bodies are the same each time. */
function prng (seed: number): () => number {
  let s = (seed * 2654435761) >>> 0
  return () => {
    s = (s + 0x6d2b79f5) >>> 0
    let x = s
    x = Math.imul(x ^ (x >>> 15), x | 1)
    x ^= x + Math.imul(x ^ (x >>> 7), x | 61)
    return ((x ^ (x >>> 14)) >>> 0) / 2 ** 32
  }
}

/** An object schema whose property names and bounds are request i's own. */
function schema (i: number, variant: number): Record<string, unknown> {
  const random = prng(i * 31 + variant)
  const properties: Record<string, unknown> = {}
  // Short, so a prompt with a few tools fits stories260k's 512-token window; distinct by i.
  const count = 1 + Math.floor(random() * 3)
  for (let p = 0; p < count; p++) {
    const name = 'abcdefgh'[p] + String(i % 1000)
    switch (Math.floor(random() * 4)) {
      case 0: properties[name] = { type: 'string', maxLength: 4 + (i % 997) }; break
      case 1: properties[name] = { type: 'integer', minimum: variant, maximum: 100 + i }; break
      case 2: properties[name] = { enum: [`a${i}`, `b${variant}`] }; break
      default: properties[name] = { type: 'array', items: { type: 'boolean' }, maxItems: 1 + (i % 991) }
    }
  }
  return { type: 'object', properties, required: Object.keys(properties).slice(0, 1), additionalProperties: false }
}

const MAX_TOKENS = 16
const PROMPT = 'Once upon a time'

export function soakBody (i: number, model: string): { door: SoakDoor; body: Record<string, unknown> } {
  const n = Math.abs(i)
  const tools = (count: number): Array<{ name: string; description: string; parameters: Record<string, unknown> }> =>
    Array.from({ length: count }, (_, t) => ({ name: `t${t}_${n}`, description: 'A tool.', parameters: schema(n, t + 1) }))
  switch (n % 6) {
    case 0:
      return { door: 'chat', body: { model, max_tokens: MAX_TOKENS, messages: [{ role: 'user', content: PROMPT }], response_format: { type: 'json_schema', json_schema: { name: `r${n}`, strict: true, schema: schema(n, 0) } } } }
    case 1:
      return { door: 'chat', body: { model, max_tokens: MAX_TOKENS, messages: [{ role: 'user', content: PROMPT }], tools: tools(2).map(f => ({ type: 'function', function: f })), tool_choice: 'required' } }
    case 2:
      return { door: 'responses', body: { model, max_output_tokens: MAX_TOKENS, input: PROMPT, store: n % 12 === 2, tools: tools(2).map(f => ({ type: 'function', ...f })), tool_choice: 'required' } }
    case 3:
      return { door: 'responses', body: { model, max_output_tokens: MAX_TOKENS, input: PROMPT, store: false, tools: tools(2).map(f => ({ type: 'function', ...f })) } }
    case 4:
      return { door: 'messages', body: { model, max_tokens: MAX_TOKENS, messages: [{ role: 'user', content: PROMPT }], tools: tools(2).map(f => ({ name: f.name, description: f.description, input_schema: f.parameters })), tool_choice: { type: 'any' } } }
    default:
      return { door: 'messages', body: { model, max_tokens: MAX_TOKENS, messages: [{ role: 'user', content: PROMPT }], tools: tools(2).map(f => ({ name: f.name, description: f.description, input_schema: f.parameters })) } }
  }
}
