// The path a newcomer takes: a directory of their own with a .env in it, and
// `chatd serve` started as `npm start` starts it (node src/cli.ts serve), with
// no MODELS_FILE or TIERS_FILE: the shipped models/models.json and tiers.json,
// found in chatd's own directory whatever the working directory is. The
// upstream model's ${UPSTREAM_*} variables come from .env alone, and real
// environment variables still win over .env.

import t from 'tap'
import { startChatd } from '../helpers/chatd-process.ts'
import { REFUSED_URL } from '../helpers/refused.ts'
import { fakeUpstream } from '../helpers/fake-upstream.ts'

const ADMIN_KEY = 'sk-chatd-' + 'N3wc0mer'.repeat(4)

/** Nothing from the test's own environment that would decide what this checks. */
const CLEAN = {
  UPSTREAM_BASE_URL: undefined,
  UPSTREAM_API_KEY: undefined,
  UPSTREAM_MODEL: undefined,
  MODELS_FILE: undefined,
  TIERS_FILE: undefined,
  DATABASE_URL: undefined,
  CHATD_ADMIN_KEY: undefined,
}

async function ask (url: string): Promise<{ status: number; body: any }> {
  const res = await fetch(`${url}/api/v1/chat/completions`, {
    method: 'POST',
    headers: { authorization: `Bearer ${ADMIN_KEY}`, 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'upstream', messages: [{ role: 'user', content: 'Hello' }] }),
  })
  return { status: res.status, body: await res.json() }
}

t.test('UPSTREAM_* set only in .env: the upstream model is ready and answers', async t => {
  const upstream = await fakeUpstream(t, { delayMs: 0 })
  const dir = t.testdir({
    '.env': [`UPSTREAM_BASE_URL=${upstream.url}/v1`, 'UPSTREAM_MODEL=model-from-dotenv', `CHATD_ADMIN_KEY=${ADMIN_KEY}`, ''].join('\n'),
  })
  // MODELS_DIR keeps the shipped local model's files (if this checkout has them) out of the test.
  const chatd = await startChatd(t, { ...CLEAN, MODELS_DIR: `${dir}/no-models` }, { cwd: dir })

  const readyz = await (await fetch(`${chatd.url}/readyz`)).json() as { models: Record<string, string> }
  t.equal(readyz.models.upstream, 'ready', `the upstream model is ready (${JSON.stringify(readyz)})`)
  const models = await (await fetch(`${chatd.url}/api/v1/models/upstream`, { headers: { authorization: `Bearer ${ADMIN_KEY}` } })).json() as { status: string; status_reason?: string }
  t.equal(models.status, 'ready', models.status_reason ?? 'GET /api/v1/models/upstream')

  const reply = await ask(chatd.url)
  t.equal(reply.status, 200, JSON.stringify(reply.body))
  t.equal(reply.body.choices[0].message.content, 'Once upon a time')
  t.equal(JSON.parse(upstream.requests.at(-1)!.body).model, 'model-from-dotenv', '.env named the upstream model')
  t.notMatch(chatd.output(), /shown only now/, 'CHATD_ADMIN_KEY from .env: no key to show')
})

t.test('a real environment variable wins over the same one in .env', async t => {
  const upstream = await fakeUpstream(t, { delayMs: 0 })
  const dir = t.testdir({
    '.env': [`UPSTREAM_BASE_URL=${REFUSED_URL}/v1`, 'UPSTREAM_MODEL=model-from-dotenv', `CHATD_ADMIN_KEY=${ADMIN_KEY}`, ''].join('\n'),
  })
  const chatd = await startChatd(t, { ...CLEAN, MODELS_DIR: `${dir}/no-models`, UPSTREAM_BASE_URL: `${upstream.url}/v1` }, { cwd: dir })
  const reply = await ask(chatd.url)
  t.equal(reply.status, 200, JSON.stringify(reply.body))
  t.equal(upstream.requests.length, 1, 'the environment\'s UPSTREAM_BASE_URL was used, not .env\'s')
  t.equal(JSON.parse(upstream.requests[0].body).model, 'model-from-dotenv', 'what only .env sets still applies')
})
