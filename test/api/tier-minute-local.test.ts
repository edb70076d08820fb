// The tier's minute on the local engine (stories260k, whose 512-token vocabulary
// makes about one token of each character): the prompt's estimate uses the
// model's own characters per token, and a reply without max_tokens stops where
// the prompt's real length and the reply together reach the minute, so one
// request never takes more than tokens_per_minute (it once took 51 of 50).
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import t from 'tap'
import { startStoriesServer } from '../helpers/stories-server.ts'

const MODEL = 'stories260k'
const KEY = `sk-chatd-${'minute12'.repeat(4)}`
const dir = mkdtempSync(join(tmpdir(), 'chatd-minute-'))
t.teardown(() => rmSync(dir, { recursive: true, force: true }))
writeFileSync(join(dir, 'tiers.json'), JSON.stringify({ default: 'tight', tiers: { tight: { tokens_per_minute: 50, models: ['*'] } } }))
const server = await startStoriesServer(t, { modelId: MODEL, key: KEY, env: { TIERS_FILE: join(dir, 'tiers.json') } })
const post = (path: string, body: Record<string, unknown>) => fetch(`${server.url}${path}`, {
  method: 'POST',
  headers: { authorization: `Bearer ${KEY}`, 'content-type': 'application/json' },
  body: JSON.stringify({ model: MODEL, ...body }),
})

t.test('count_tokens estimates with the model\'s own characters per token', async t => {
  const res = await post('/api/v1/messages/count_tokens', { messages: [{ role: 'user', content: 'Once upon a time there was a little dog.' }] })
  t.equal(res.status, 200)
  const { input_tokens: tokens } = await res.json() as { input_tokens: number }
  t.ok(tokens > 40 / 4 * 2, `about a token a character, not a quarter: ${tokens} for 40 characters`)
})

t.test('without max_tokens, prompt and reply stay within the 50 tokens of the minute, however the estimate missed', async t => {
  // Emoji are bytes to this vocabulary: four tokens for two characters, where the estimate counts 1.5.
  const res = await post('/api/v1/chat/completions', { temperature: 0, messages: [{ role: 'user', content: '🙂'.repeat(5) }] })
  t.equal(res.status, 200, await res.clone().text())
  const body = await res.json() as { usage: { total_tokens: number; prompt_tokens: number }; choices: Array<{ finish_reason: string }> }
  t.ok(body.usage.prompt_tokens > 10, `the prompt is longer than its estimate: ${body.usage.prompt_tokens} tokens`)
  t.ok(body.usage.total_tokens <= 50, `total ${body.usage.total_tokens} (prompt ${body.usage.prompt_tokens})`)
  t.equal(body.choices[0].finish_reason, 'length', 'cut where the minute ends')
})
