// How many characters of a prompt a model's tokenizer makes one token: what the
// tier limits divide a prompt's length by to reserve tokens before the real
// count is known (limits/request-cost.ts). Measured once per model on a sample
// shaped like today's prompts (instructions in English, tool definitions as
// JSON, a little code), since the ratio depends on the tokenizer far more
// than on the text: about 4.3 for Qwen's 151k-token vocabulary, about 1 for a
// 512-token one. A backend that cannot measure (an upstream) says nothing and
// the limits' default applies (limits/request-cost.ts).

const SAMPLE = [
  'You are a coding assistant. Read the repository, run the tests, and explain what you changed and why. ',
  'When a command fails, show its output and say what you will try next; never guess at a file you have not read.\n',
  JSON.stringify([
    { type: 'function', function: { name: 'read_file', description: 'Read a file of the repository.', parameters: { type: 'object', properties: { path: { type: 'string', description: 'The path, relative to the root.' }, offset: { type: 'integer', minimum: 0 } }, required: ['path'], additionalProperties: false } } },
    { type: 'function', function: { name: 'run', description: 'Run a shell command and return its output.', parameters: { type: 'object', properties: { command: { type: 'string' }, timeout_ms: { type: 'integer', maximum: 600000 } }, required: ['command'] } } },
  ]),
  '\nfunction add (a, b) {\n  return a + b\n}\nconsole.log(add(17, 23))\n',
  'The quick brown fox jumps over the lazy dog; 17 * 23 = 391. Once upon a time, there was a little girl who liked to read.',
].join('')

/** Characters per token of `encode` on the sample, rounded down to a tenth (never below 0.5); undefined when it gives no tokens. */
export function measureCharsPerToken (encode: (text: string) => number): number | undefined {
  const tokens = encode(SAMPLE)
  if (!(tokens > 0)) return undefined
  return Math.max(0.5, Math.floor(SAMPLE.length / tokens * 10) / 10)
}
