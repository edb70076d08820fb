// A fault signal crashes chatd, so its supervisor restarts it: no listener for
// SIGSEGV, SIGBUS, SIGFPE or SIGILL (a JavaScript one turns a WebAssembly
// trap into a fault raised forever, with the process spinning and never
// exiting). The schema whose compile once did that, a 200-level $ref chain,
// is now a 400, and the real server goes on answering.
import { join } from 'node:path'
import t, { type Test } from 'tap'
import { startChatd } from '../helpers/chatd-process.ts'
import { refChain } from '../helpers/hostile-schemas.ts'
import { storiesModelEntry } from '../helpers/models.ts'

const KEY = `sk-chatd-${'faultSig'.repeat(4)}`
const MODEL = 'stories260k'

async function start (t: Test) {
  const dir = t.testdir({ 'models.json': JSON.stringify({ models: [storiesModelEntry(MODEL)] }) })
  return await startChatd(t, { DATABASE_URL: `sqlite://${join(dir, 'chatd.db')}`, MODELS_FILE: join(dir, 'models.json'), CHATD_ADMIN_KEY: KEY })
}

const post = (url: string, body: Record<string, unknown>): Promise<Response> => fetch(`${url}/api/v1/chat/completions`, {
  method: 'POST',
  headers: { authorization: `Bearer ${KEY}`, 'content-type': 'application/json' },
  body: JSON.stringify({ model: MODEL, messages: [{ role: 'user', content: 'Once upon a time' }], temperature: 0, ...body }),
})

t.test('the 200-level $ref chain is a 400 and the server keeps answering', async t => {
  const chatd = await start(t)
  const res = await post(chatd.url, { max_tokens: 5, response_format: { type: 'json_schema', json_schema: { name: 'chain', schema: refChain(200), strict: true } } })
  t.equal(res.status, 400, chatd.output())
  t.equal(((await res.json()) as { error: { param: string } }).error.param, 'response_format')
  for (let i = 0; i < 3; i++) t.equal((await post(chatd.url, { max_tokens: 2 })).status, 200, `request ${i + 1} after it`)
  t.equal(chatd.child.exitCode, null, 'still running')
})

for (const signal of ['SIGSEGV', 'SIGBUS', 'SIGFPE', 'SIGILL'] as const) {
  t.test(`${signal} ends the process by that signal (no listener catches it)`, async t => {
    const chatd = await start(t)
    chatd.child.kill(signal)
    t.equal(await chatd.exited, signal, `died of ${signal}, as a supervisor expects; output:\n${chatd.output()}`)
  })
}
